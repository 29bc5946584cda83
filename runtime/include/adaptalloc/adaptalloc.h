/*
 * adaptalloc/adaptalloc.h — the umbrella header of the full library
 * (libadaptalloc): includes every public module header. It lives beside the
 * runtime's header, the top of the stack; users of libadaptalloc_core alone
 * include adaptalloc/core.h (and cuda.h). Include the module headers
 * directly to depend on less.
 *
 *   common.h    error codes, export macro, clock
 *   core.h      backends, pools, size classes, stats (the allocator)
 *   cuda.h      pinned staging buffers, the packer, mapped buffers
 *   store.h     the SQLite telemetry store
 *   policy.h    policies: JSON parse/validate/serialise, merge patch
 *   adapt.h     the policy loop
 *   replay.h    the offline replay simulator
 *   http.h      the embedded HTTP server
 *   runtime.h   the embedding runtime (environment, lazy start)
 */
#ifndef ADAPTALLOC_ADAPTALLOC_H
#define ADAPTALLOC_ADAPTALLOC_H

#include "adaptalloc/common.h"
#include "adaptalloc/core.h"
#include "adaptalloc/cuda.h"
#include "adaptalloc/transfer.h"
#include "adaptalloc/store.h"
#include "adaptalloc/policy.h"
#include "adaptalloc/adapt.h"
#include "adaptalloc/replay.h"
#include "adaptalloc/http.h"
#include "adaptalloc/runtime.h"

#endif
