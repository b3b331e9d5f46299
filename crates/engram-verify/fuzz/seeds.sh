#!/bin/sh
# Writes the seed corpora of every fuzz target into corpus/<target>/ (or into the directory
# given as the first argument): valid exports, checkpoint notes, audit entries and honest
# Merkle proofs, built deterministically by src/bin/make_seeds.rs, which also checks that
# every seed export verifies OK with engram_verify::verify_export.
#
# Usage (from anywhere): crates/engram-verify/fuzz/seeds.sh [out-dir]
# The corpus directories are not committed (see .gitignore); rerun this after a clean checkout.
set -eu
cd "$(dirname "$0")"
out="${1:-corpus}"
cargo run --quiet --release --bin make_seeds -- "$out"
