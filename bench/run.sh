#!/usr/bin/env bash
# Engram against etcd 3.4, side by side, on this machine: installs what is missing (etcd from
# Debian, matplotlib from PyPI), builds the release binaries, runs `versus` with the arguments
# given (or the documented defaults), and draws the plots.
#
#   bash bench/run.sh                       # the run docs/benchmarks.md reports
#   bash bench/run.sh --phases writes --seconds 5 --rounds 1
set -euo pipefail
cd "$(dirname "$0")/.."
source .ci/setup.sh

if ! command -v etcd >/dev/null 2>&1; then
  echo "==> installing etcd-server (apt)"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq etcd-server >/dev/null
fi
python3 -c "import matplotlib" 2>/dev/null || python3 -m pip install -q matplotlib

cargo build --release -p engram-cli -p engram-bench --bin engram --bin versus
mkdir -p bench/results
out=bench/results/versus.json
if [ $# -eq 0 ]; then
  set -- --clients 1,16,64,256 --datoms 1,10 --value-bytes 100 --rounds 2 --seconds 4 \
    --warmup-secs 2 --keys 100000 --history-values 1000000 --history-clients 1,16 \
    --subscribers 10,100,1000
fi
target/release/versus --out "$out" "$@" | tee bench/results/versus.txt
python3 bench/plot.py "$out" docs/img
