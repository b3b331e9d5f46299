#!/usr/bin/env bash
# Long soaks of the simulation suite: runs N seeds starting at START (default 0) over every
# core, then prints the sweep summary (seeds/minute, simulated/wall time, failures with their
# one-line replays).
#
#   sim-tests/run-seeds.sh 1000          # seeds 0..999
#   sim-tests/run-seeds.sh 500 10000     # seeds 10000..10499
#
# Replaying one seed:  ENGRAM_SIM_SEED=42 cargo sim -p engram-sim-tests --test seeds -- one_seed --exact --nocapture
set -euo pipefail
cd "$(dirname "$0")/.."
if [ $# -lt 1 ]; then
  echo "usage: sim-tests/run-seeds.sh N [START]" >&2
  exit 2
fi
count=$1
start=${2:-0}
[ -f .ci/setup.sh ] && source .ci/setup.sh
ENGRAM_SIM_SEEDS="$count" ENGRAM_SIM_START="$start" ENGRAM_SIM_THREADS="${ENGRAM_SIM_THREADS:-$(nproc)}" \
  cargo sim -p engram-sim-tests --test seeds -- seed_sweep --exact --nocapture
