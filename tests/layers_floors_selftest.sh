#!/usr/bin/env bash
# test_layers_refuse: tools/check-layers.sh fails on http's floors when a
# file calls up (an object that says it is head.c, layer 0, calling the
# router's aa__http_route), when the list puts a file below one it calls
# (router.c moved to layer 0), and when a compiled file is in no layer; it
# passes on the list and objects as they are.
#   bash tests/layers_floors_selftest.sh <http/src> <objects list> [nm]
set -euo pipefail
src=$1
list=$2
NM=${3:-nm}
CC=${CC:-cc}
here=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
# shellcheck source=tests/layers_selftest_lib.sh
. "$here/tests/layers_selftest_lib.sh"
run() { expect_layers "$@"; } # expect-rc label header list
hdr=$src/http_internal.h
run 0 "http/src as it is" "$hdr" "$list"

mkdir -p "$tmp/up.dir/src"
printf 'void aa__http_route(void);\nvoid aa__up(void) { aa__http_route(); }\n' |
  "$CC" -c -x c - -o "$tmp/up.dir/src/head.c.o"
{ cat "$list"; echo "$tmp/up.dir/src/head.c.o"; } >"$tmp/up.txt"
run 1 "head.c (layer 0) calls the router's aa__http_route" "$hdr" "$tmp/up.txt"

sed -E 's/^( \*   layer 3 router: +)router\.c/\1/; s/^( \*   layer 0 base: +)/\1router.c /' "$hdr" >"$tmp/low.h"
grep -q 'layer 0 base: *router.c' "$tmp/low.h"
run 1 "router.c listed on the bottom floor, below the endpoints it calls" "$tmp/low.h" "$list"

sed -E 's/^( \*   layer 0 base: +addr\.c) head\.c/\1/' "$hdr" >"$tmp/none.h"
run 1 "head.c in no layer" "$tmp/none.h" "$list"
exit $fail
