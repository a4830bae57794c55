#!/usr/bin/env bash
# Tests scripts/prereqs.sh against fake library folders: for each machine
# shape, the detection must pick the right packages to install (or none);
# and its apt-get calls (through sudo unless root) against a fake apt-get.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=prereqs.sh
. scripts/prereqs.sh

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0

machine() { # name, then files to create under the fake root
  local root="$tmp/$1"; shift
  mkdir -p "$root/usr/lib/x86_64-linux-gnu"
  local f
  for f in "$@"; do mkdir -p "$root/$(dirname "$f")"; : > "$root/$f"; done
  printf '%s' "$root"
}

expect() { # name, root, expected plan (package names, space-separated)
  local name=$1 root=$2 want=$3 got
  got=$(VERROU_PREREQ_ROOT=$root libclang_plan | awk '{print $1}' | xargs)
  if [ "$got" = "$want" ]; then
    echo "ok   $name: ${got:-nothing to install}"
  else
    echo "FAIL $name: planned '${got}', expected '${want}'"
    failures=$((failures + 1))
  fi
}

headers14=usr/lib/llvm-14/lib/clang/14.0.6/include/stddef.h

expect "nothing installed" "$(machine none)" "libclang1-14 libclang-common-14-dev"
expect "only libclang-cpp14 (the reported machine)" \
  "$(machine cpp-only usr/lib/llvm-14/lib/libclang-cpp.so.14 usr/lib/x86_64-linux-gnu/libclang-cpp.so.14)" \
  "libclang1-14 libclang-common-14-dev"
expect "libclang-cpp14 and headers, no C library" \
  "$(machine cpp-headers usr/lib/llvm-14/lib/libclang-cpp.so.14 "$headers14")" \
  "libclang1-14"
expect "libclang1-14 present" \
  "$(machine l14 usr/lib/llvm-14/lib/libclang.so.1 usr/lib/x86_64-linux-gnu/libclang-14.so.1 "$headers14")" \
  ""
expect "libclang1-14 in the multiarch folder only" \
  "$(machine l14-multiarch usr/lib/x86_64-linux-gnu/libclang-14.so.14.0.6 "$headers14")" \
  ""
expect "libclang1-14 without resource headers" \
  "$(machine l14-noheaders usr/lib/llvm-14/lib/libclang.so.1)" \
  "libclang-common-14-dev"
expect "newer LLVM 16 present" \
  "$(machine l16 usr/lib/llvm-16/lib/libclang.so.1 usr/lib/llvm-16/lib/clang/16/include/stddef.h)" \
  ""
expect "LLVM 15 with only libclang-cpp15" \
  "$(machine cpp15 usr/lib/llvm-15/lib/libclang-cpp.so.15 usr/lib/llvm-15/lib/clang/15.0.7/include/stddef.h)" \
  "libclang1-15"

# PostgreSQL: detected by the executables the harness runs.
pg_machine() { # name, then executables to create under the fake root
  local root="$tmp/$1"; shift
  mkdir -p "$root/usr/lib"
  local f
  for f in "$@"; do mkdir -p "$root/$(dirname "$f")"; : > "$root/$f"; chmod +x "$root/$f"; done
  printf '%s' "$root"
}
expect_pg() { # name, root, expected plan
  local name=$1 root=$2 want=$3 got
  got=$(VERROU_PREREQ_ROOT=$root postgres_plan | awk '{print $1}' | xargs)
  if [ "$got" = "$want" ]; then
    echo "ok   $name: ${got:-nothing to install}"
  else
    echo "FAIL $name: planned '${got}', expected '${want}'"
    failures=$((failures + 1))
  fi
}
pg15=usr/lib/postgresql/15/bin
expect_pg "no PostgreSQL, no PgBouncer" "$(pg_machine pg-none)" "postgresql pgbouncer"
expect_pg "PostgreSQL 15 and PgBouncer" "$(pg_machine pg-all $pg15/initdb $pg15/postgres usr/sbin/pgbouncer)" ""
expect_pg "only the client (psql), no server" "$(pg_machine pg-client $pg15/psql usr/sbin/pgbouncer)" "postgresql"
expect_pg "initdb without postgres" "$(pg_machine pg-half $pg15/initdb usr/sbin/pgbouncer)" "postgresql"
expect_pg "server without PgBouncer" "$(pg_machine pg-nobouncer $pg15/initdb $pg15/postgres)" "pgbouncer"
mkdir -p "$tmp/pg-noexec/usr/lib/postgresql/15/bin" && : > "$tmp/pg-noexec/$pg15/initdb" && : > "$tmp/pg-noexec/$pg15/postgres"
expect_pg "files that are not executable" "$tmp/pg-noexec" "postgresql pgbouncer"

# The apt-get calls, with fake id / sudo / apt-get on PATH that log them.
fakebin="$tmp/bin"
mkdir -p "$fakebin"
cat > "$fakebin/id" <<'FAKE'
#!/usr/bin/env bash
echo "$FAKE_UID"
FAKE
cat > "$fakebin/sudo" <<'FAKE'
#!/usr/bin/env bash
printf 'sudo ' >> "$FAKE_LOG"; exec "$@"
FAKE
cat > "$fakebin/apt-get" <<'FAKE'
#!/usr/bin/env bash
echo "apt-get $* (DEBIAN_FRONTEND=${DEBIAN_FRONTEND:-})" >> "$FAKE_LOG"
FAKE
chmod +x "$fakebin"/*
expect_apt() { # name, uid, expected log
  local name=$1 uid=$2 want=$3 got
  : > "$tmp/apt.log"
  (export PATH="$fakebin:$PATH" FAKE_UID=$uid FAKE_LOG="$tmp/apt.log"; apt_update; apt_install pkg-a pkg-b)
  got=$(cat "$tmp/apt.log")
  if [ "$got" = "$want" ]; then
    echo "ok   $name"
  else
    echo "FAIL $name: ran"; echo "$got"; echo "expected"; echo "$want"
    failures=$((failures + 1))
  fi
}
expect_apt "apt-get through sudo when not root" 1000 "sudo apt-get update -qq (DEBIAN_FRONTEND=noninteractive)
sudo apt-get install -y -qq --no-install-recommends pkg-a pkg-b (DEBIAN_FRONTEND=noninteractive)"
expect_apt "apt-get directly as root" 0 "apt-get update -qq (DEBIAN_FRONTEND=noninteractive)
apt-get install -y -qq --no-install-recommends pkg-a pkg-b (DEBIAN_FRONTEND=noninteractive)"

# protoc: detected by running it on a file importing the well-known types, through PATH or $PROTOC.
expect_protoc() { # name, protoc script body (empty: none), expected plan
  local name=$1 body=$2 want=$3 dir="$tmp/protoc-$RANDOM" got
  mkdir -p "$dir"
  if [ -n "$body" ]; then printf '#!/usr/bin/env bash\n%s\n' "$body" > "$dir/protoc"; chmod +x "$dir/protoc"; fi
  got=$(PATH="$dir:/usr/bin:/bin" PROTOC="$dir/protoc" protoc_plan | awk '{print $1}' | xargs)
  if [ "$got" = "$want" ]; then
    echo "ok   $name: ${got:-nothing to install}"
  else
    echo "FAIL $name: planned '${got}', expected '${want}'"
    failures=$((failures + 1))
  fi
}
expect_protoc "protoc runs and finds the well-known types" 'echo "libprotoc 3.21.12"' ""
expect_protoc "no protoc" "" "protobuf-compiler libprotobuf-dev"
expect_protoc "a protoc that does not run" 'exit 127' "protobuf-compiler libprotobuf-dev"
# The fresh Debian machine: protobuf-compiler installed, libprotobuf-dev not.
expect_protoc "protoc without the well-known types (the fresh machine)" 'case "$*" in *--version*) echo "libprotoc 3.21.12" ;; *) echo "google/protobuf/descriptor.proto: File not found." >&2; exit 1 ;; esac' "libprotobuf-dev"

# OpenSSL for openssl-sys: pkg-config must run and know openssl.
expect_openssl() { # name, pkg-config script body (empty: none), expected plan
  local name=$1 body=$2 want=$3 dir="$tmp/pkgconfig-$RANDOM" got
  mkdir -p "$dir"
  if [ -n "$body" ]; then printf '#!/usr/bin/env bash\n%s\n' "$body" > "$dir/pkg-config"; chmod +x "$dir/pkg-config"; fi
  got=$(PKG_CONFIG="$dir/pkg-config" openssl_plan | awk '{print $1}' | xargs)
  if [ "$got" = "$want" ]; then
    echo "ok   $name: ${got:-nothing to install}"
  else
    echo "FAIL $name: planned '${got}', expected '${want}'"
    failures=$((failures + 1))
  fi
}
expect_openssl "pkg-config knows openssl" 'exit 0' ""
expect_openssl "no openssl headers" 'exit 1' "libssl-dev"
expect_openssl "no pkg-config" "" "pkg-config libssl-dev"

if [ "$failures" -gt 0 ]; then
  echo "prerequisite detection: $failures case(s) failed"
  exit 1
fi
echo "prerequisite detection: all cases pass"
