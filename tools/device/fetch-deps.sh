#!/bin/sh
# tools/device/fetch-deps.sh — runs HERE (a machine with apt and network):
# downloads the Debian packages that the device machine lacks (libmicrohttpd,
# cJSON, cmocka, SQLite headers: the "device" lines of tools/packages.txt)
# into the git-ignored folder .deps/ at the repository root. tools/device/setup.sh unpacks them ON the device.
#
# Usage: tools/device/fetch-deps.sh        (idempotent; re-downloads nothing present)
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
deps="$root/.deps"
mkdir -p "$deps"
cd "$deps"

# Runtime libraries plus their -dev packages (headers and the unversioned .so
# link): the names tagged "device" in tools/packages.txt, the one package
# list. libsqlite3-0 gives the -dev symlink something to point at; the
# device's own libsqlite3.so.0 and libgnutls30 serve at run time.
pkgs=$(bash "$root/tools/install-deps.sh" --device)
if [ -z "$pkgs" ]; then
  echo "fetch-deps: no package tagged 'device' in tools/packages.txt" >&2
  exit 1
fi

missing=""
for p in $pkgs; do
  if ! ls "${p}"_*.deb >/dev/null 2>&1; then
    missing="$missing $p"
  fi
done
if [ -n "$missing" ]; then
  echo "fetch-deps: downloading:$missing"
  # shellcheck disable=SC2086
  apt-get download $missing
fi
ls -1 "$deps"/*.deb
du -sh "$deps"
