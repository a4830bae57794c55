#!/usr/bin/env bash
# Prerequisite detection for scripts/test.sh, by what the build actually loads,
# and the apt-get calls that install what is missing (also scripts/valkey.sh's).
# Sourced by both; tested by scripts/test-prereqs.sh against fake library
# folders (VERROU_PREREQ_ROOT points the search at such a folder) and a fake
# apt-get.
#
# - bindgen (through clang-sys) dlopens the libclang *C* library:
#   libclang.so*, or libclang-<version>.so* — never libclang-cpp.so*, which is
#   the C++ interface and is what Debian's libclang-cpp<N> package ships.
# - clang needs its resource headers (stddef.h, stdarg.h) to parse the module
#   headers: <llvm>/lib/clang/<version>/include/stddef.h.

prereq_root() { printf '%s' "${VERROU_PREREQ_ROOT:-}"; }

# The library folders clang-sys searches on Debian.
libclang_dirs() {
  local root; root=$(prereq_root)
  local d
  for d in "$root"/usr/lib/llvm-*/lib "$root"/usr/lib/x86_64-linux-gnu "$root"/usr/lib/aarch64-linux-gnu "$root"/usr/lib "$root"/usr/local/lib; do
    [ -d "$d" ] && printf '%s\n' "$d"
  done
}

# Prints the path of a loadable libclang C library, or nothing.
find_libclang() {
  if [ -n "${LIBCLANG_PATH:-}" ] && [ -z "$(prereq_root)" ]; then
    local f
    for f in "$LIBCLANG_PATH"/libclang.so* "$LIBCLANG_PATH"/libclang-[0-9]*.so*; do
      [ -e "$f" ] && { printf '%s\n' "$f"; return 0; }
    done
  fi
  local dir f
  while IFS= read -r dir; do
    # libclang.so, libclang.so.1, libclang.so.14.0.6, libclang-14.so.1 ...
    # The digit after "libclang-" is what keeps libclang-cpp.so.* out.
    for f in "$dir"/libclang.so* "$dir"/libclang-[0-9]*.so*; do
      [ -e "$f" ] && { printf '%s\n' "$f"; return 0; }
    done
  done < <(libclang_dirs)
  return 1
}

# Prints clang's stddef.h from a resource folder, or nothing.
find_clang_headers() {
  local root; root=$(prereq_root)
  local f
  for f in "$root"/usr/lib/llvm-*/lib/clang/*/include/stddef.h "$root"/usr/lib/clang/*/include/stddef.h; do
    [ -e "$f" ] && { printf '%s\n' "$f"; return 0; }
  done
  return 1
}

# The LLVM major version to install for: the newest LLVM already on the
# machine (so libclang matches the installed LLVM), else Debian 12's 14.
llvm_version() {
  local root; root=$(prereq_root)
  local best="" d v
  for d in "$root"/usr/lib/llvm-*; do
    [ -d "$d" ] || continue
    v=${d##*/llvm-}
    case "$v" in ''|*[!0-9]*) continue ;; esac
    if [ -z "$best" ] || [ "$v" -gt "$best" ]; then best=$v; fi
  done
  printf '%s' "${best:-${VERROU_DEFAULT_LLVM:-14}}"
}

# Prints one line per missing prerequisite: "<package> <why>".
libclang_plan() {
  local v; v=$(llvm_version)
  if ! find_libclang >/dev/null; then
    printf 'libclang1-%s the libclang C library bindgen loads (libclang.so* / libclang-<N>.so*; libclang-cpp does not count)\n' "$v"
  fi
  if ! find_clang_headers >/dev/null; then
    printf 'libclang-common-%s-dev clang resource headers (lib/clang/<N>/include/stddef.h)\n' "$v"
  fi
}

# apt-get as root: through sudo when not root already. Sourced by
# scripts/test.sh and scripts/valkey.sh (which sends its output to stderr:
# its stdout is the server's path).
apt_as_root() {
  local sudo=""
  if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
  DEBIAN_FRONTEND=noninteractive $sudo apt-get "$@"
}

# Refreshes the package lists, quietly.
apt_update() { apt_as_root update -qq; }

# Installs Debian packages without recommends, quietly and non-interactively.
apt_install() { apt_as_root install -y -qq --no-install-recommends "$@"; }

# PostgreSQL for lock-postgres's tests. The harness runs initdb and postgres
# from $VERROU_PG_BIN, else from the newest /usr/lib/postgresql/<N>/bin
# (Debian's layout: not on PATH), and pgbouncer from $VERROU_PGBOUNCER, else
# PATH or /usr/sbin. Prints the folder / the binary, or nothing.
find_pg_bin() {
  local root; root=$(prereq_root)
  if [ -n "${VERROU_PG_BIN:-}" ] && [ -z "$root" ]; then
    [ -x "$VERROU_PG_BIN/initdb" ] && [ -x "$VERROU_PG_BIN/postgres" ] && { printf '%s\n' "$VERROU_PG_BIN"; return 0; }
    return 1
  fi
  local d
  for d in "$root"/usr/lib/postgresql/*/bin; do
    [ -x "$d/initdb" ] && [ -x "$d/postgres" ] && { printf '%s\n' "$d"; return 0; }
  done
  return 1
}

find_pgbouncer() {
  local root; root=$(prereq_root)
  if [ -z "$root" ]; then
    if [ -n "${VERROU_PGBOUNCER:-}" ]; then
      [ -x "$VERROU_PGBOUNCER" ] && { printf '%s\n' "$VERROU_PGBOUNCER"; return 0; }
      return 1
    fi
    command -v pgbouncer 2>/dev/null && return 0
  fi
  local f
  for f in "$root"/usr/sbin/pgbouncer "$root"/usr/bin/pgbouncer; do
    [ -x "$f" ] && { printf '%s\n' "$f"; return 0; }
  done
  return 1
}

# Prints one line per missing PostgreSQL prerequisite: "<package> <why>".
postgres_plan() {
  if ! find_pg_bin >/dev/null; then
    printf 'postgresql PostgreSQL (initdb and postgres under /usr/lib/postgresql/<N>/bin) for the lock-postgres tests\n'
  fi
  if ! find_pgbouncer >/dev/null; then
    printf 'pgbouncer PgBouncer (transaction pooling in front of the lock-postgres test server)\n'
  fi
}

# PostgreSQL and PgBouncer refuse to run as root: the harness runs them as
# the user "postgres" (Debian's package creates it; a server from
# VERROU_PG_BIN may come without). Creates it when we are root and it is missing.
ensure_postgres_user() {
  if [ "$(id -u)" -eq 0 ] && ! id postgres >/dev/null 2>&1; then
    echo "==> creating the system user postgres (the test servers run as it)"
    useradd --system --user-group --no-create-home --shell /usr/sbin/nologin postgres
  fi
}

# Prints what etcd-client's build script (lock-etcd) needs from protoc: it
# calls `$PROTOC` or `protoc` on etcd's .proto files, which import Google's
# well-known types (descriptor.proto, struct.proto). Debian ships those in
# libprotobuf-dev, not with protobuf-compiler, so a protoc that runs can still
# fail the build. Detected by what the build does: protoc compiling a file
# that imports both (a file named protoc that does not run does not count).
protoc_plan() {
  local protoc=${PROTOC:-protoc} dir
  if ! "$protoc" --version >/dev/null 2>&1; then
    printf 'protobuf-compiler protoc, which etcd-client (lock-etcd) runs at build time\n'
    printf 'libprotobuf-dev the well-known .proto files etcd-client'"'"'s protos import\n'
    return 0
  fi
  dir=$(mktemp -d)
  printf 'syntax = "proto3";\nimport "google/protobuf/descriptor.proto";\nimport "google/protobuf/struct.proto";\n' > "$dir/verrou_probe.proto"
  if ! "$protoc" -I "$dir" --descriptor_set_out=/dev/null "$dir/verrou_probe.proto" >/dev/null 2>&1; then
    printf 'libprotobuf-dev the well-known .proto files etcd-client'"'"'s protos import (google/protobuf/descriptor.proto)\n'
  fi
  rm -rf "$dir"
}

# openssl-sys (sqlx's native-tls, which the bench's distributed-lock-postgres
# peer turns on) finds OpenSSL through pkg-config at build time.
openssl_plan() {
  local pc=${PKG_CONFIG:-pkg-config}
  if ! command -v "$pc" >/dev/null 2>&1; then
    printf 'pkg-config pkg-config, which openssl-sys runs at build time (verrou-bench peers)\n'
  fi
  if ! "$pc" --exists openssl >/dev/null 2>&1; then
    printf 'libssl-dev the OpenSSL headers and library openssl-sys links (verrou-bench peers)\n'
  fi
}
