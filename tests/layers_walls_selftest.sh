#!/usr/bin/env bash
# test_core_walls_refuse: tools/check-layers.sh fails on a copy of core/src
# where a file outside a walled subsystem (the large path, the small path,
# the size sampler) includes its private header, and on one where a file
# reaches its fields; passes on the copy left as it is.
#   bash tests/layers_walls_selftest.sh <core/src> <objects list> [nm]
set -euo pipefail
src=$1
list=$2
NM=${3:-nm}
here=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
# shellcheck source=tests/layers_selftest_lib.sh
. "$here/tests/layers_selftest_lib.sh"
run() { expect_layers "$1" "$2" "$tmp/src/core_internal.h" "$list"; } # expect-rc label
fresh() { rm -rf "$tmp/src" && cp -r "$src" "$tmp/src"; }

fresh
run 0 "core/src as it is"

fresh
printf '#include "large_internal.h"\n' >>"$tmp/src/inspect.c"
run 1 "inspect.c includes large_internal.h"

fresh
printf 'static unsigned peek(aa_pool *p) { return p->large->npark; }\n' >>"$tmp/src/stats.c"
printf 'static unsigned peek2(aa_tcache_t *t) { return t->ltc.nheld; }\n' >>"$tmp/src/pool.c"
run 1 "stats.c and pool.c reach the large path's fields"

fresh
printf '#include "../large_internal.h"\n' >>"$tmp/src/cuda/cuda_common.c"
run 1 "cuda/cuda_common.c includes it by a relative path"

fresh
printf 'static unsigned peek3(aa_tcache_t *t) { aa__ltc *l = &t->ltc; return l->nheld; }\n' >>"$tmp/src/pool.c"
run 1 "pool.c takes the address of a thread cache's large cache"

fresh
printf '#define PEEK(p) ((p)->large->in_use)\n' >>"$tmp/src/stats.c"
run 1 "stats.c reaches a field in a macro"

fresh
printf '/* pool->large->mu in a comment */\nstatic const char *s_ = "t->ltc.nheld";\n' >>"$tmp/src/stats.c"
run 0 "a comment and a string that name the fields"

fresh
printf '#include "small_internal.h"\n' >>"$tmp/src/stats.c"
run 1 "stats.c includes small_internal.h"

fresh
printf 'static size_t peek4(aa_pool *p) { return p->small->ntable; }\n' >>"$tmp/src/pool.c"
run 1 "pool.c reaches the small path's state"

fresh
printf 'static uint32_t peek5(aa_tcache_t *t) { return t->stc.bins[0].n; }\n' >>"$tmp/src/tcache.c"
run 1 "tcache.c reaches a thread cache's small bins"

fresh
printf 'static void *peek6(aa_tcache_t *t) { return &t -> stc; }\n' >>"$tmp/src/large_ltc.c"
run 1 "the large path takes the address of the small bins"

fresh
printf '#include "sampler_internal.h"\n' >>"$tmp/src/inspect.c"
run 1 "inspect.c includes sampler_internal.h"

fresh
printf 'static uint64_t peek7(aa_tcache_t *t) { return aa__smp_of(t)->bucket[0]; }\n' >>"$tmp/src/alloc.c"
run 1 "alloc.c (the small path) reads the sampler's per-thread histogram"

fresh
printf 'static void *peek8(aa_pool *p, aa_tcache_t *t) { return p->sampler ? (void *)&t->smp : 0; }\n' >>"$tmp/src/stats.c"
run 1 "stats.c reaches the sampler's state"

fresh
if command -v clang >/dev/null; then
  CC=clang run 0 "CC=clang (comments stripped by gcc)"
fi
exit $fail
