/*
 * adaptalloc/internal/debug.h — the tiered assertions every module uses, one
 * definition (util/src/debug.c prints the failure and aborts). The level is
 * AA_DEBUG, set for the whole build by CMake (option AA_DEBUG; CI's ASan
 * build uses 2):
 *
 *   aa__assert(e)            AA_DEBUG >= 1 (the default): cheap checks that
 *                            stay on in release builds
 *   aa__assert_internal(e)   AA_DEBUG >= 2: invariants of a module's own
 *                            state (free lists, a queue's ends and count, a
 *                            state machine's transitions, a prepared change)
 *   aa__assert_expensive(e)  AA_DEBUG >= 3: full walks (every slab, every
 *                            queued item)
 *
 * A check that is off does not evaluate its expression: no side effects in
 * e. Internal (aa__), never installed: modules reach it through the CMake
 * target aa_util_headers, as util.h.
 */
#ifndef AA_INTERNAL_DEBUG_H
#define AA_INTERNAL_DEBUG_H

#ifndef AA_DEBUG
#define AA_DEBUG 1
#endif

/* Prints "adaptalloc: assertion failed: <expr> (<file>:<line>)" to stderr
 * and aborts. */
void aa__assert_fail(const char *expr, const char *file, int line)
#if defined(__GNUC__) || defined(__clang__)
    __attribute__((noreturn, cold))
#endif
    ;

#if AA_DEBUG >= 1
#define aa__assert(e) ((e) ? (void)0 : aa__assert_fail(#e, __FILE__, __LINE__))
#else
#define aa__assert(e) ((void)0)
#endif
#if AA_DEBUG >= 2
#define aa__assert_internal(e) aa__assert(e)
#else
#define aa__assert_internal(e) ((void)0)
#endif
#if AA_DEBUG >= 3
#define aa__assert_expensive(e) aa__assert(e)
#else
#define aa__assert_expensive(e) ((void)0)
#endif

#endif
