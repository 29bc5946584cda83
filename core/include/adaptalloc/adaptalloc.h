/*
 * adaptalloc/adaptalloc.h — the umbrella header: includes every public
 * module header. Include the module headers directly to depend on less.
 */
#ifndef ADAPTALLOC_ADAPTALLOC_H
#define ADAPTALLOC_ADAPTALLOC_H

#include "adaptalloc/common.h"
#include "adaptalloc/core.h"
#include "adaptalloc/runtime.h"

#endif
