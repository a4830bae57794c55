#!/usr/bin/env bash
# Runs the workspace's test binaries a few at a time (cargo test runs them one
# after the other, and most of their time is spent waiting on real servers
# and short TTLs, not on the CPU), then the doc tests.
#
#   scripts/test-binaries.sh                   build, run every test binary, doc tests
#   scripts/test-binaries.sh --valkey SERVER   the same, and lock-redis-lua's and
#                                              lock-redlock's binaries once more on
#                                              SERVER (VERROU_REDIS_SERVER), in the
#                                              same pool
#   scripts/test-binaries.sh --list            print "<package dir> <executable>" lines
#
# VERROU_TEST_JOBS sets how many binaries run at once (default 3);
# VERROU_TEST_TIMEOUT bounds each binary (default 900 s) so a hang fails with
# its name instead of eating CI's limit. Each binary's output goes to
# <logs>/<name>.log (VERROU_TEST_LOGS, default target/test-logs) and is
# printed when it fails.
set -euo pipefail
cd "$(dirname "$0")/.."

list() {
  # The executables of the workspace build, each with its package's directory
  # (cargo test runs a binary there; some tests read files relative to it).
  cargo test --workspace --all-features --no-run --message-format=json 2>/dev/null \
    | grep '"executable":"/' | grep -E '"profile":\{[^}]*"test":true' \
    | sed -E 's/.*"manifest_path":"([^"]*)\/Cargo.toml".*"executable":"([^"]*)".*/\1 \2/'
}

if [ "${1:-}" = "--list" ]; then
  list
  exit 0
fi

jobs=${VERROU_TEST_JOBS:-3}
limit=${VERROU_TEST_TIMEOUT:-900}
logs=${VERROU_TEST_LOGS:-target/test-logs}

# One binary, in its package's directory, with an optional VAR=value.
run_one() {
  local dir=$1 exe=$2 env=${3:-} name log start rc
  name=$(basename "$dir")-$(basename "$exe")${env:+-with-${env%%=*}}
  log=$logs/$name.log
  start=$(date +%s)
  rc=0
  (cd "$dir" && env ${env:+"$env"} timeout --kill-after=10 "$limit" "$exe") >"$log" 2>&1 || rc=$?
  local took=$(($(date +%s) - start))
  if [ "$rc" -eq 0 ]; then
    echo "ok     ${took}s $name ($(grep -E '^test result:' "$log" | tail -1 | sed -E 's/^test result: ok\. //'))"
  else
    [ "$rc" -eq 124 ] && echo "TIMEOUT after ${limit}s: $name" >>"$log"
    echo "FAILED ${took}s $name (exit $rc); its output:"
    sed 's/^/    /' "$log"
    return 1
  fi
}
export -f run_one
export logs limit

# The packages whose integration binaries (tests/it) run longest, longest
# first (seconds in a warm run of 2026-12-07: redis-lua 198 on Redis and 195
# on Valkey, postgres 184, tair 180, etcd 151, nats 67; the rest under 40).
LONGEST="lock-redis-lua lock-postgres lock-tair lock-etcd lock-nats"

# Runs the "<dir> <executable> [VAR=value]" lines of stdin, $jobs at a
# time, longest first: the integration binaries of $LONGEST in that order,
# then the other integration binaries, then the unit-test binaries. Started
# in list order, the two redis-lua binaries (one on Valkey) came last and
# ran alone for minutes at the end.
run_all() {
  local binaries count status=0
  binaries=$(cat)
  count=$(printf '%s\n' "$binaries" | grep -c . || true)
  [ "$count" -gt 0 ] || { echo "no test binaries found"; return 1; }
  mkdir -p "$logs"
  echo "==> running $count test binaries, $jobs at a time"
  printf '%s\n' "$binaries" \
    | awk -v longest="$LONGEST" '
        BEGIN { n = split(longest, names, " "); for (i = 1; i <= n; i++) rank[names[i]] = i }
        {
          pkg = $1; sub(/.*\//, "", pkg)
          if ($2 !~ /\/it-[0-9a-f]+$/) order = 200
          else if (pkg in rank) order = rank[pkg]
          else order = 100
          print order, $0
        }' | sort -s -k1,1n | cut -d' ' -f2- \
    | xargs -P "$jobs" -L 1 bash -c 'run_one "$@"' run_one || status=$?
  if [ "$status" -ne 0 ]; then
    echo "==> test binaries failed (logs in $logs)"
    return 1
  fi
}

valkey=
if [ "${1:-}" = "--valkey" ]; then
  valkey=${2:?--valkey needs the server binary}
fi

rm -rf "$logs"
# Build first with cargo's own output, so a compile error reads as usual.
cargo test --workspace --all-features --no-run
binaries=$(list)
{
  printf '%s\n' "$binaries"
  if [ -n "$valkey" ]; then
    again=$(printf '%s\n' "$binaries" | grep -E '/(lock-redis-lua|lock-redlock) ' || true)
    [ "$(printf '%s\n' "$again" | grep -c .)" -ge 3 ] || { echo "no redis-lua / redlock test binaries found" >&2; exit 1; }
    printf '%s\n' "$again" | sed "s|\$| VERROU_REDIS_SERVER=$valkey|"
  fi
} | run_all

echo "==> doc tests"
cargo test --workspace --all-features --doc
