#!/usr/bin/env bash
# The project's one test command: installs what the tests need when missing,
# then runs format, lint and the whole test suite. `.ci/run` calls this.
set -euo pipefail
cd "$(dirname "$0")/.."

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

# System packages: a real redis-server (+ redis-cli) for the backend tests, and
# libclang for the redis-module bindings of the TairString-compatible module.
missing=()
command -v "${VERROU_REDIS_SERVER:-redis-server}" >/dev/null 2>&1 || missing+=(redis-server)
command -v redis-cli >/dev/null 2>&1 || missing+=(redis-tools)
if ! ls /usr/lib/llvm-*/lib/libclang*.so* >/dev/null 2>&1 && ! ls /usr/lib/x86_64-linux-gnu/libclang*.so* >/dev/null 2>&1; then
  missing+=(libclang1-14)
fi
if ! ls /usr/lib/llvm-*/lib/clang/*/include/stddef.h >/dev/null 2>&1; then
  missing+=(libclang-common-14-dev)
fi
if [ "${#missing[@]}" -gt 0 ]; then
  echo "==> installing: ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
# Debian's redis-server package starts a service on 6379; the tests never use it.

echo "==> toolchain: $(cargo --version)"
cargo fmt --version >/dev/null && cargo clippy --version >/dev/null || { echo "rustfmt and clippy are required (rustup component add rustfmt clippy)"; exit 1; }

echo "==> build the TairString-compatible module (release) for the Tair tests"
cargo build --release -p tair-module

echo "==> cargo fmt --check"
cargo fmt --all --check

echo "==> cargo clippy -D warnings"
cargo clippy --workspace --all-targets --all-features -- -D warnings

echo "==> cargo test"
cargo test --workspace --all-features

echo "==> benchmark smoke test (quick mode, no timing assertions)"
cargo run --quiet -p verrou-bench -- --quick

echo "==> quickstart"
cargo run --quiet --example quickstart
