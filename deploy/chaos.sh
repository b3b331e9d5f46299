#!/usr/bin/env bash
# Chaos on real containers: builds the engram:dev image (from the debug build unless
# ENGRAM_CHAOS_PROFILE=release), then runs engram-chaos against a fresh 3-node compose cluster
# (deploy/compose.yaml): kills (the leader too), network partitions and pauses while clients
# write, then checks every acknowledged write, the audit chains and linearizability. The
# cluster runs in enforced mode, the compose default: engram-chaos makes an administrator key
# for the run, gives the nodes its public half (ENGRAM_ADMIN) and signs every call with it.
#
#   deploy/chaos.sh                         the CI default: 6 cycles, seed 1 (about 2 minutes)
#   deploy/chaos.sh --cycles 100 --seed 7   a soak
#   deploy/chaos.sh --help                  every option of engram-chaos
set -euo pipefail
cd "$(dirname "$0")/.."
profile=${ENGRAM_CHAOS_PROFILE:-debug}
if [ "$profile" = release ]; then
  cargo build --release -p engram-cli -p engram-chaos
  bin=target/release
else
  # The workspace's every target, as `cargo test --workspace --all-targets` builds it: the same
  # features for every dependency, so after the tests this reuses their build. Building only
  # `-p engram-cli -p engram-chaos` unifies features differently and rebuilds RocksDB's C++
  # and much of the graph (10-20 minutes on 2 cores).
  cargo build --workspace --all-targets
  bin=target/debug
fi
if [ "${1:-}" = "--help" ] || [ "${1:-}" = "-h" ]; then
  exec "$bin/engram-chaos" --help
fi
command -v docker-compose >/dev/null || { echo "chaos.sh: docker-compose is not installed" >&2; exit 1; }
deploy/build-image.sh --binary "$bin/engram" --tag engram:dev
exec "$bin/engram-chaos" --image engram:dev "$@"
