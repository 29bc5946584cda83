#!/usr/bin/env bash
# test_tools_packages: the one package list (tools/packages.txt) and its
# reader. Every name is a plausible Debian package name; --device names the
# eight libraries the GPU machine lacks; the packages the README, CI and the
# Python package need are in the list; --list and --ci --list run without
# installing anything; a bad option is exit 2. Usage: packages.sh SOURCE_DIR
set -euo pipefail
src=$1
list="$src/tools/packages.txt"
deps="$src/tools/install-deps.sh"
fail() { echo "FAIL: $*" >&2; exit 1; }

bad=$(grep -v '^[[:space:]]*#' "$list" | awk 'NF { print $1 }' | grep -Ev '^[a-z0-9][a-z0-9.+-]+$' || true)
[ -z "$bad" ] || fail "not package names: $bad"
dev=$(bash "$deps" --device | sort | tr '\n' ' ')
want="libcjson-dev libcjson1 libcmocka-dev libcmocka0 libmicrohttpd-dev libmicrohttpd12 libsqlite3-0 libsqlite3-dev "
[ "$dev" = "$want" ] || fail "--device gave '$dev', want '$want'"
for p in build-essential cmake curl nodejs npm chromium python3-pybind11 python3-setuptools \
         python3-venv python3-pytest clang prometheus; do
  grep -Eq "^$p( |\$)" "$list" || fail "$p is not in tools/packages.txt"
done
bash "$deps" --list >/dev/null || fail "--list failed"
bash "$deps" --ci --list >/dev/null || fail "--ci --list failed"
set +e
bash "$deps" --bogus 2>/dev/null
rc=$?
set -e
[ $rc -eq 2 ] || fail "--bogus exited $rc, want 2"
grep -q 'tools/install-deps.sh' "$src/.ci/run" || fail ".ci/run does not read the list"
grep -q 'install-deps.sh" --device' "$src/tools/device/fetch-deps.sh" || fail "fetch-deps.sh does not read the list"
grep -q 'bash tools/setup.sh' "$src/README.md" || fail "README lacks the set-up command"
grep -q 'bash tools/run-tests.sh' "$src/README.md" || fail "README lacks the test command"
echo "packages: ok"
