/*
 * bench_alloc.c — loads the allocators under test side by side into one
 * process without any of them replacing the process's malloc.
 *
 *   adaptalloc, adaptalloc_notelemetry  two pools over one host backend,
 *                                       the second with telemetry off
 *   glibc     malloc/free looked up in libc.so.6's own handle, so an
 *             LD_PRELOADed allocator cannot be measured in its place
 *   jemalloc  libjemalloc.so.2 dlopen'd RTLD_LOCAL; mallocx/sdallocx
 *   mimalloc  libmimalloc.so.2 dlopen'd RTLD_LOCAL; mi_malloc/mi_free
 *
 * Every function pointer is checked with dladdr against the library it must
 * come from, and the result is printed on stderr.
 *
 * Entry points: bench_allocators_open, bench_allocators_close,
 * bench_need_tls_reexec.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "bench.h"

#define BENCH_JE_LIB "libjemalloc.so.2"
#define BENCH_MI_LIB "libmimalloc.so.2"
#define BENCH_LIBC_LIB "libc.so.6"

/* Which shared object holds `fn`; "?" when dladdr cannot tell. */
static void where_is(const void *fn, char *buf, size_t cap) {
  Dl_info info;
  memset(&info, 0, sizeof info);
  if (fn != NULL && dladdr(fn, &info) != 0 && info.dli_fname != NULL) {
    snprintf(buf, cap, "%s", info.dli_fname);
  } else {
    snprintf(buf, cap, "?");
  }
}

/* dlsym into a function pointer without the object/function pointer
 * conversion warning that -Wpedantic gives for a plain cast. */
static void *sym(void *handle, const char *name) {
  dlerror();
  return dlsym(handle, name);
}

static bool is_static_tls_error(const char *msg) {
  return msg != NULL && strstr(msg, "static TLS") != NULL;
}

bool bench_need_tls_reexec(void) {
  void *h = dlopen(BENCH_JE_LIB, RTLD_NOW | RTLD_LOCAL);
  if (h != NULL) {
    dlclose(h);
    return false;
  }
  return is_static_tls_error(dlerror());
}

static int open_aa(bench_allocator *a, aa_backend *backend, bool telemetry) {
  aa_pool_config cfg;
  aa_pool *pool = NULL;
  int rc;

  aa_pool_config_init(&cfg);
  cfg.name = telemetry ? "bench" : "bench_notelemetry";
  cfg.backend = backend;
  rc = aa_pool_new(&cfg, &pool);
  if (rc != AA_OK) {
    fprintf(stderr, "bench: aa_pool_new: %s\n", aa_strerror(rc));
    goto out;
  }
  if (!telemetry) {
    aa_pool_set_telemetry(pool, false);
  }
  a->kind = BENCH_AA;
  a->pool = pool;
  a->aa_alloc_fn = aa_alloc;
  a->aa_free_fn = aa_free;
  a->available = true;
  where_is((const void *)(uintptr_t)aa_alloc, a->where, sizeof a->where);
out:
  return rc;
}

static void open_libc(bench_allocator *a) {
  void *h = dlopen(BENCH_LIBC_LIB, RTLD_NOW | RTLD_NOLOAD);
  void *m;
  void *f;

  a->kind = BENCH_LIBC;
  if (h == NULL) {
    fprintf(stderr, "bench: glibc: dlopen %s: %s\n", BENCH_LIBC_LIB, dlerror());
    return;
  }
  m = sym(h, "malloc");
  f = sym(h, "free");
  if (m == NULL || f == NULL) {
    fprintf(stderr, "bench: glibc: malloc/free not found in %s\n", BENCH_LIBC_LIB);
    dlclose(h);
    return;
  }
  a->handle = h;
  memcpy(&a->malloc_fn, &m, sizeof m);
  memcpy(&a->free_fn, &f, sizeof f);
  a->available = true;
  where_is(m, a->where, sizeof a->where);
}

static void open_je(bench_allocator *a) {
  void *h = dlopen(BENCH_JE_LIB, RTLD_NOW | RTLD_LOCAL);
  void *m;
  void *f;

  a->kind = BENCH_JE;
  if (h == NULL) {
    fprintf(stderr, "bench: jemalloc unavailable: %s\n", dlerror());
    return;
  }
  m = sym(h, "mallocx");
  f = sym(h, "sdallocx");
  if (m == NULL || f == NULL) {
    fprintf(stderr, "bench: jemalloc: mallocx/sdallocx not found\n");
    dlclose(h);
    return;
  }
  a->handle = h;
  memcpy(&a->mallocx_fn, &m, sizeof m);
  memcpy(&a->sdallocx_fn, &f, sizeof f);
  a->available = true;
  where_is(m, a->where, sizeof a->where);
}

static void open_mi(bench_allocator *a) {
  void *h = dlopen(BENCH_MI_LIB, RTLD_NOW | RTLD_LOCAL);
  void *m;
  void *f;

  a->kind = BENCH_MI;
  if (h == NULL) {
    fprintf(stderr, "bench: mimalloc unavailable: %s\n", dlerror());
    return;
  }
  m = sym(h, "mi_malloc");
  f = sym(h, "mi_free");
  if (m == NULL || f == NULL) {
    fprintf(stderr, "bench: mimalloc: mi_malloc/mi_free not found\n");
    dlclose(h);
    return;
  }
  a->handle = h;
  memcpy(&a->malloc_fn, &m, sizeof m);
  memcpy(&a->free_fn, &f, sizeof f);
  a->available = true;
  where_is(m, a->where, sizeof a->where);
}

/* The library each allocator must resolve into; a mismatch means we would
 * measure one allocator under another's name, so it is switched off. */
static const char *expected_lib(const bench_allocator *a) {
  switch (a->kind) {
  case BENCH_LIBC:
    return "libc.so";
  case BENCH_JE:
    return "libjemalloc";
  case BENCH_MI:
    return "libmimalloc";
  case BENCH_AA:
  default:
    return NULL;
  }
}

int bench_allocators_open(bench_allocator out[BENCH_ALLOCATORS], bool verbose) {
  static const char *const names[BENCH_ALLOCATORS] = {
      "adaptalloc", "adaptalloc_notelemetry", "glibc", "jemalloc", "mimalloc"};
  aa_backend *backend = NULL;
  char def[256];
  void *def_malloc;
  int rc;
  int i;

  memset(out, 0, sizeof(bench_allocator) * BENCH_ALLOCATORS);
  for (i = 0; i < BENCH_ALLOCATORS; i++) {
    out[i].name = names[i];
  }
  rc = aa_backend_host_new(&backend);
  if (rc != AA_OK) {
    fprintf(stderr, "bench: aa_backend_host_new: %s\n", aa_strerror(rc));
    goto fail;
  }
  out[0].backend = backend; /* owned by slot 0, shared by slot 1 */
  rc = open_aa(&out[0], backend, true);
  if (rc != AA_OK) {
    goto fail;
  }
  rc = open_aa(&out[1], backend, false);
  if (rc != AA_OK) {
    goto fail;
  }
  open_libc(&out[2]);
  open_je(&out[3]);
  open_mi(&out[4]);

  for (i = 0; i < BENCH_ALLOCATORS; i++) {
    const char *want = expected_lib(&out[i]);
    if (out[i].available && want != NULL && strstr(out[i].where, want) == NULL) {
      fprintf(stderr, "bench: %s resolves into %s, not %s*: switched off\n",
              out[i].name, out[i].where, want);
      out[i].available = false;
    }
  }
  def_malloc = sym(RTLD_DEFAULT, "malloc");
  where_is(def_malloc, def, sizeof def);
  if (verbose) {
    for (i = 0; i < BENCH_ALLOCATORS; i++) {
      fprintf(stderr, "bench: %-24s %s\n", out[i].name,
              out[i].available ? out[i].where : "(unavailable)");
    }
    fprintf(stderr, "bench: %-24s %s%s\n", "process malloc", def,
            strstr(def, "libc.so") != NULL ? "" : "  (interposed; glibc is measured through libc.so.6)");
  }
  return AA_OK;

fail:
  bench_allocators_close(out);
  return rc;
}

void bench_allocators_close(bench_allocator a[BENCH_ALLOCATORS]) {
  int i;
  for (i = BENCH_ALLOCATORS - 1; i >= 0; i--) {
    if (a[i].pool != NULL) {
      aa_pool_destroy(a[i].pool);
      a[i].pool = NULL;
    }
    /* jemalloc and mimalloc stay mapped: their TLS destructors may still
     * run at thread exit, so unloading them is not safe. libc's handle is
     * a reference count only. */
    if (a[i].kind == BENCH_LIBC && a[i].handle != NULL) {
      dlclose(a[i].handle);
    }
    a[i].handle = NULL;
    a[i].available = false;
  }
  if (a[0].backend != NULL) {
    aa_backend_destroy(a[0].backend);
    a[0].backend = NULL;
  }
}
