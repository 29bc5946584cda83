/*
 * backend_host.c — the host backend (mmap/munmap) and aa_backend_destroy.
 *
 * Entry points: aa_backend_host_new, aa_backend_host_fail_nth (fault
 * injection: fail the nth alloc call), aa_backend_host_hold_events (keep
 * recorded events pending so tests can observe stream-ordered reuse),
 * aa_backend_host_stream_busy (one stream's work outstanding: its
 * stream_query says pending, its events stay pending),
 * aa_backend_host_stream_waits / aa_backend_host_refuse_waits (the
 * stream_wait op: host memory has nothing to order, so it counts the calls),
 * aa_backend_host_counts, aa_backend_host_aliasable (shared pages and
 * map_alias, for stitching), aa_backend_host_alias_counts,
 * aa_backend_host_alias_runs, aa_backend_host_alias_per_handle,
 * aa_backend_host_event_counts.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/mman.h>

#include "adaptalloc/cuda.h" /* AA_STREAM_HOST */
#include "core_internal.h"
#include "test_hooks.h"

typedef struct host_event {
  struct host_event *next, *prev;
  int pending;
  aa_stream stream;
  uint64_t busy;    /* its stream's busy period when recorded, 0 = idle then */
  uint64_t deps[8]; /* busy periods its stream waited for (stream_wait) then */
  int ndeps;
} host_event;

/* Streams marked busy (aa_backend_host_stream_busy): each busy period has
 * its own number, so an event recorded in it completes when it ends. */
#define HOST_BUSY_MAX 8
typedef struct host_busy {
  aa_stream stream;
  uint64_t period; /* 0 = free slot */
} host_busy;

typedef struct host_ctx {
  pthread_mutex_t mu;
  _Atomic uint64_t calls;   /* alloc calls seen (for fail_nth) */
  _Atomic uint64_t fail_at; /* 0 = off */
  _Atomic bool fail_every;
  _Atomic uint64_t allocs, frees, bytes_mapped;
  _Atomic uint64_t aliases, unaliases; /* map_alias and unmap_alias calls */
  _Atomic uint64_t alias_runs;         /* map_alias_run calls that mapped their range */
  bool shared;                         /* aliasable (aa_backend_host_aliasable): pages mapped shared */
  _Atomic uint64_t ev_recorded;
  _Atomic uint64_t queries;
  _Atomic uint64_t waits, waits_pending; /* stream_wait calls; on a pending event */
  _Atomic bool no_wait;                  /* stream_wait refuses (AA_EAGAIN) */
  bool hold;                             /* under mu */
  host_event *events;                    /* outstanding (recorded, not released), under mu */
  uint64_t ev_outstanding;
  host_busy busy[HOST_BUSY_MAX]; /* under mu */
  uint64_t periods;              /* busy periods so far, under mu */
  /* stream_wait's orderings: the busy periods (of other streams) each
   * stream waits for, directly or through an event recorded on a stream
   * that waited; inactive ones are pruned. Under mu. */
  struct {
    aa_stream stream;
    int n;
    uint64_t deps[8];
  } waiting[HOST_BUSY_MAX];
} host_ctx;

#define HOST_DEPS 8

/* The busy period `stream` is in, 0 when idle. Under mu. */
static uint64_t busy_period(const host_ctx *h, aa_stream stream) {
  for (int i = 0; i < HOST_BUSY_MAX; i++) {
    if (h->busy[i].period != 0 && h->busy[i].stream == stream)
      return h->busy[i].period;
  }
  return 0;
}

static bool period_active(const host_ctx *h, uint64_t p) {
  for (int i = 0; p != 0 && i < HOST_BUSY_MAX; i++) {
    if (h->busy[i].period == p)
      return true;
  }
  return false;
}

/* `stream`'s slot in `waiting`, its inactive periods pruned; -1 when it
 * has none (and `add` is false or no slot is free). Under mu. */
static int waiting_slot(host_ctx *h, aa_stream stream, bool add) {
  int at = -1;
  for (int i = 0; i < HOST_BUSY_MAX; i++) {
    int k = 0;
    for (int j = 0; j < h->waiting[i].n; j++) {
      if (period_active(h, h->waiting[i].deps[j]))
        h->waiting[i].deps[k++] = h->waiting[i].deps[j];
    }
    h->waiting[i].n = k;
    if (k > 0 && h->waiting[i].stream == stream)
      at = i;
  }
  for (int i = 0; at < 0 && add && i < HOST_BUSY_MAX; i++) {
    if (h->waiting[i].n == 0) {
      h->waiting[i].stream = stream;
      at = i;
    }
  }
  return at;
}

/* Adds busy period `p` (if active) to what stream slot `w` waits for. */
static bool waiting_add(host_ctx *h, int w, uint64_t p) {
  if (!period_active(h, p))
    return true;
  for (int j = 0; j < h->waiting[w].n; j++) {
    if (h->waiting[w].deps[j] == p)
      return true;
  }
  if (h->waiting[w].n == HOST_DEPS)
    return false;
  h->waiting[w].deps[h->waiting[w].n++] = p;
  return true;
}

/* Whether `stream` waits (stream_wait) for an active busy period. */
static bool stream_waiting(host_ctx *h, aa_stream stream) {
  return waiting_slot(h, stream, false) >= 0;
}

/* Sizes that are whole 64 KiB granules are mapped on a granule boundary
 * (map a little more, unmap both ends), so a slab's first block always sits
 * in the `lo` half of its page-map entry and free needs a single probe. */
#define HOST_ALIGN ((size_t)64 << 10)
/* `size` bytes at an `align`-aligned address (a power of two above 4 KiB,
 * size <= SIZE_MAX - align): map a little more, unmap both ends. */
static void *mmap_aligned(size_t size, size_t align, int prot, int fl) {
  size_t span = size + align - 4096;
  void *m = mmap(NULL, span, prot, fl, -1, 0);
  if (m == MAP_FAILED)
    return NULL;
  uintptr_t a = (uintptr_t)m, b = (a + align - 1) & ~(uintptr_t)(align - 1);
  if (b > a)
    munmap(m, b - a);
  if (a + span > b + size)
    munmap((void *)(b + size), a + span - (b + size));
  return (void *)b;
}

static void *map_aligned(size_t size) {
  int prot = PROT_READ | PROT_WRITE, fl = MAP_PRIVATE | MAP_ANONYMOUS;
  if (size % HOST_ALIGN != 0 || size > SIZE_MAX - HOST_ALIGN) {
    void *p = mmap(NULL, size, prot, fl, -1, 0);
    return p == MAP_FAILED ? NULL : p;
  }
  return mmap_aligned(size, HOST_ALIGN, prot, fl);
}

/* Fault injection: whether this alloc or map call is the one to fail. */
static bool fail_injected(host_ctx *h) {
  uint64_t c = atomic_fetch_add(&h->calls, 1) + 1;
  uint64_t at = atomic_load(&h->fail_at);
  return at != 0 && (c == at || (c > at && atomic_load(&h->fail_every)));
}

static int host_alloc(aa_backend *b, size_t size, void **out) {
  host_ctx *h = b->ctx;
  *out = NULL;
  if (size == 0 || size % 4096 != 0)
    return AA_EINVAL;
  if (fail_injected(h))
    return AA_ENOMEM;
  void *p = map_aligned(size);
  if (p == NULL)
    return AA_ENOMEM;
  atomic_fetch_add(&h->allocs, 1);
  atomic_fetch_add(&h->bytes_mapped, size);
  *out = p;
  return AA_OK;
}

static void host_free(aa_backend *b, void *ptr, size_t size) {
  host_ctx *h = b->ctx;
  if (ptr == NULL)
    return;
  munmap(ptr, size);
  atomic_fetch_add(&h->frees, 1);
  atomic_fetch_sub(&h->bytes_mapped, size);
}

/* Virtual memory (the expandable large path): address space reserved
 * PROT_NONE; a map makes the pages there readable and writable, private
 * (copy-on-write in a forked child, as malloc's memory is); unmap drops them
 * and takes access away again. An aliasable backend
 * (aa_backend_host_aliasable, for stitching's tests) maps shared anonymous
 * pages instead, so that map_alias can show them at a second address
 * (mremap of a shared mapping with old size 0 makes another mapping of it);
 * a forked child then shares them, which is why it is not the default. 2 MiB
 * pages, as on CUDA. Map calls count towards fail_nth like alloc calls; the
 * handle is the address map put the pages at. */
#define HOST_VPAGE ((size_t)2 << 20)

static size_t host_map_granularity(aa_backend *b) {
  (void)b;
  return HOST_VPAGE;
}

static int host_va_reserve(aa_backend *b, size_t size, void **out) {
  (void)b;
  *out = NULL;
  if (size == 0 || size % HOST_VPAGE != 0 || size > SIZE_MAX - HOST_VPAGE)
    return AA_EINVAL;
  *out = mmap_aligned(size, HOST_VPAGE, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE);
  return *out != NULL ? AA_OK : AA_ENOMEM;
}

static void host_va_release(aa_backend *b, void *base, size_t size) {
  (void)b;
  if (base != NULL)
    munmap(base, size);
}

/* [addr, addr + size) back to reserved address space (PROT_NONE), the
 * memory dropped (shared pages: once no other mapping of them is left). */
static void host_unreserve_pages(void *addr, size_t size, bool shared) {
  if (shared) {
    void *m = mmap(addr, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED,
                   -1, 0);
    if (m != MAP_FAILED)
      return;
    (void)madvise(addr, size, MADV_REMOVE); /* no new mapping (out of map slots): drop */
  } else {
    (void)madvise(addr, size, MADV_DONTNEED);
  }
  (void)mprotect(addr, size, PROT_NONE);
}

static bool host_vm_args(const void *addr, size_t size) {
  return addr != NULL && size != 0 && (uintptr_t)addr % HOST_VPAGE == 0 && size % HOST_VPAGE == 0;
}

static int host_map(aa_backend *b, void *addr, size_t size, void **handle) {
  host_ctx *h = b->ctx;
  *handle = NULL;
  if (!host_vm_args(addr, size))
    return AA_EINVAL;
  if (fail_injected(h))
    return AA_ENOMEM;
  if (h->shared) {
    void *m =
        mmap(addr, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
    if (m == MAP_FAILED)
      return errno == ENOMEM ? AA_ENOMEM : AA_EBACKEND;
  } else if (mprotect(addr, size, PROT_READ | PROT_WRITE) != 0) {
    return errno == ENOMEM ? AA_ENOMEM : AA_EBACKEND;
  }
  atomic_fetch_add(&h->allocs, 1);
  atomic_fetch_add(&h->bytes_mapped, size);
  *handle = addr;
  return AA_OK;
}

static void host_unmap(aa_backend *b, void *addr, size_t size, void *handle) {
  host_ctx *h = b->ctx;
  (void)handle;
  if (addr == NULL)
    return;
  host_unreserve_pages(addr, size, h->shared);
  atomic_fetch_add(&h->frees, 1);
  atomic_fetch_sub(&h->bytes_mapped, size);
}

static int host_map_alias(aa_backend *b, void *addr, size_t size, void *handle) {
  host_ctx *h = b->ctx;
  if (!host_vm_args(addr, size) || handle == NULL || addr == handle)
    return AA_EINVAL;
  if (fail_injected(h))
    return AA_ENOMEM;
  void *m = mremap(handle, 0, size, MREMAP_MAYMOVE | MREMAP_FIXED, addr);
  if (m == MAP_FAILED)
    return errno == ENOMEM ? AA_ENOMEM : AA_EBACKEND;
  atomic_fetch_add(&h->aliases, 1);
  return AA_OK;
}

static void host_unmap_alias(aa_backend *b, void *addr, size_t size, void *handle) {
  host_ctx *h = b->ctx;
  (void)handle;
  if (addr == NULL)
    return;
  host_unreserve_pages(addr, size, true);
  atomic_fetch_add(&h->unaliases, 1);
}

/* map_alias handle by handle (each counted, each a fault injection point);
 * a failure undoes the ones this call made. Counted in alias_runs. */
static int host_map_alias_run(aa_backend *b, void *addr, void *const *handles,
                              const size_t *sizes, size_t n) {
  host_ctx *h = b->ctx;
  size_t off = 0, i;
  int rc = AA_OK;
  if (n == 0 || handles == NULL || sizes == NULL)
    return AA_EINVAL;
  for (i = 0; i < n; i++) {
    rc = host_map_alias(b, (char *)addr + off, sizes[i], handles[i]);
    if (rc != AA_OK)
      break;
    off += sizes[i];
  }
  if (rc != AA_OK) {
    while (i-- > 0) {
      off -= sizes[i];
      host_unmap_alias(b, (char *)addr + off, sizes[i], handles[i]);
    }
    return rc;
  }
  atomic_fetch_add(&h->alias_runs, 1);
  return AA_OK;
}

static int host_event_record(aa_backend *b, aa_stream stream, void **event_out) {
  host_ctx *h = b->ctx;
  (void)stream;
  *event_out = NULL;
  host_event *e = calloc(1, sizeof *e);
  if (e == NULL)
    return AA_ENOMEM;
  pthread_mutex_lock(&h->mu);
  e->pending = h->hold;
  e->stream = stream;
  e->busy = busy_period(h, stream);
  int w = waiting_slot(h, stream, false);
  for (int j = 0; w >= 0 && j < h->waiting[w].n; j++)
    e->deps[e->ndeps++] = h->waiting[w].deps[j];
  e->next = h->events;
  if (h->events)
    h->events->prev = e;
  h->events = e;
  h->ev_outstanding++;
  pthread_mutex_unlock(&h->mu);
  atomic_fetch_add(&h->ev_recorded, 1);
  *event_out = e;
  return AA_OK;
}

static int host_event_query(aa_backend *b, void *event) {
  host_ctx *h = b->ctx;
  host_event *e = event;
  if (e == NULL)
    return AA_EINVAL;
  pthread_mutex_lock(&h->mu);
  int pending = e->pending || (e->busy != 0 && busy_period(h, e->stream) == e->busy);
  for (int j = 0; j < e->ndeps && !pending; j++)
    pending = period_active(h, e->deps[j]);
  pthread_mutex_unlock(&h->mu);
  return pending ? AA_EAGAIN : AA_OK;
}

/* Idle unless events are held or the stream is marked busy. */
static int host_stream_query(aa_backend *b, aa_stream stream) {
  host_ctx *h = b->ctx;
  atomic_fetch_add(&h->queries, 1);
  pthread_mutex_lock(&h->mu);
  bool idle = !h->hold && busy_period(h, stream) == 0 && !stream_waiting(h, stream);
  pthread_mutex_unlock(&h->mu);
  return idle ? AA_OK : AA_EAGAIN;
}

/* Host memory has no queued work to order: counts the call, and whether
 * the event was pending (the tests' evidence that a stream was ordered
 * after work that had not completed), and models the ordering as CUDA has
 * it: until the busy periods the event waits for end, `stream` is not idle
 * and the events recorded on it stay pending
 * (aa_backend_host_stream_ordered). */
static int host_stream_wait(aa_backend *b, aa_stream stream, void *event) {
  host_ctx *h = b->ctx;
  const host_event *e = event;
  int rc = AA_OK;
  if (event == NULL)
    return AA_EINVAL;
  if (atomic_load(&h->no_wait) || stream == AA_STREAM_HOST)
    return AA_EAGAIN;
  if (host_event_query(b, event) == AA_EAGAIN)
    atomic_fetch_add(&h->waits_pending, 1);
  pthread_mutex_lock(&h->mu);
  if (e->stream != stream) {
    int w = waiting_slot(h, stream, true);
    bool ok = w >= 0 && waiting_add(h, w, e->busy);
    for (int j = 0; ok && j < e->ndeps; j++)
      ok = waiting_add(h, w, e->deps[j]);
    if (!ok)
      rc = AA_ELIMIT; /* more orderings than the model holds */
  }
  pthread_mutex_unlock(&h->mu);
  if (rc == AA_OK)
    atomic_fetch_add(&h->waits, 1);
  return rc;
}

static void host_event_release(aa_backend *b, void *event) {
  host_ctx *h = b->ctx;
  host_event *e = event;
  if (e == NULL)
    return;
  pthread_mutex_lock(&h->mu);
  if (e->prev)
    e->prev->next = e->next;
  else
    h->events = e->next;
  if (e->next)
    e->next->prev = e->prev;
  h->ev_outstanding--;
  pthread_mutex_unlock(&h->mu);
  free(e);
}

static int host_synchronize(aa_backend *b) {
  (void)b; /* host memory has no queued work; held events stay held */
  return AA_OK;
}

static void host_destroy(aa_backend *b) {
  host_ctx *h = b->ctx;
  host_event *e = h->events;
  while (e) {
    host_event *n = e->next;
    free(e);
    e = n;
  }
  pthread_mutex_destroy(&h->mu);
  free(h);
  free(b);
}

static const aa_backend_ops host_ops = {
    .alloc = host_alloc,
    .free = host_free,
    .event_record = host_event_record,
    .event_query = host_event_query,
    .event_release = host_event_release,
    .synchronize = host_synchronize,
    .destroy = host_destroy,
    .map_granularity = host_map_granularity,
    .va_reserve = host_va_reserve,
    .va_release = host_va_release,
    .map = host_map,
    .unmap = host_unmap,
    .stream_query = host_stream_query,
    .stream_wait = host_stream_wait,
};

/* The same with map_alias (aa_backend_host_aliasable: shared pages),
 * filled in once from host_ops. */
static aa_backend_ops host_alias_ops;
/* and without map_alias_run (aa_backend_host_alias_per_handle) */
static aa_backend_ops host_alias1_ops;
static pthread_once_t host_alias_once = PTHREAD_ONCE_INIT;

static void host_alias_ops_init(void) {
  host_alias_ops = host_ops;
  host_alias_ops.map_alias = host_map_alias;
  host_alias_ops.unmap_alias = host_unmap_alias;
  host_alias_ops.map_alias_run = host_map_alias_run;
  host_alias1_ops = host_alias_ops;
  host_alias1_ops.map_alias_run = NULL;
}

int aa_backend_host_new(aa_backend **out) {
  int rc = AA_ENOMEM;
  aa_backend *b = NULL;
  host_ctx *h = NULL;
  if (out == NULL)
    return AA_EINVAL;
  *out = NULL;
  b = calloc(1, sizeof *b);
  if (b == NULL)
    goto fail;
  h = calloc(1, sizeof *h);
  if (h == NULL)
    goto fail;
  if (pthread_mutex_init(&h->mu, NULL) != 0)
    goto fail;
  b->ops = &host_ops;
  b->ctx = h;
  b->kind = AA_BACKEND_HOST;
  b->device = -1;
  b->name = "host";
  *out = b;
  return AA_OK;
fail:
  free(h);
  free(b);
  return rc;
}

static host_ctx *host_of(const aa_backend *b) {
  if (b == NULL || (b->ops != &host_ops && b->ops != &host_alias_ops && b->ops != &host_alias1_ops))
    return NULL;
  return b->ctx;
}

void aa_backend_host_fail_nth(aa_backend *b, uint64_t n, bool every) {
  host_ctx *h = host_of(b);
  if (h == NULL)
    return;
  atomic_store(&h->fail_every, every);
  atomic_store(&h->fail_at, n == 0 ? 0 : atomic_load(&h->calls) + n);
}

void aa_backend_host_hold_events(aa_backend *b, bool hold) {
  host_ctx *h = host_of(b);
  if (h == NULL)
    return;
  pthread_mutex_lock(&h->mu);
  h->hold = hold;
  if (!hold) {
    for (host_event *e = h->events; e; e = e->next)
      e->pending = 0;
  }
  pthread_mutex_unlock(&h->mu);
}

int aa_backend_host_stream_busy(aa_backend *b, aa_stream stream, bool busy) {
  host_ctx *h = host_of(b);
  int rc = AA_OK;
  if (h == NULL)
    return AA_EINVAL;
  pthread_mutex_lock(&h->mu);
  int at = -1;
  for (int i = 0; i < HOST_BUSY_MAX; i++) {
    if (h->busy[i].period != 0 && h->busy[i].stream == stream)
      at = i;
  }
  if (busy && at < 0) {
    for (int i = 0; i < HOST_BUSY_MAX && at < 0; i++) {
      if (h->busy[i].period == 0)
        at = i;
    }
    if (at < 0) {
      rc = AA_ELIMIT;
    } else {
      h->busy[at].stream = stream;
      h->busy[at].period = ++h->periods;
    }
  } else if (!busy && at >= 0) {
    h->busy[at].period = 0; /* the period's events complete */
  }
  pthread_mutex_unlock(&h->mu);
  return rc;
}

void aa_backend_host_stream_waits(const aa_backend *b, uint64_t *waits, uint64_t *pending) {
  host_ctx *h = host_of(b);
  if (waits)
    *waits = h ? atomic_load(&h->waits) : 0;
  if (pending)
    *pending = h ? atomic_load(&h->waits_pending) : 0;
}

void aa_backend_host_refuse_waits(aa_backend *b, bool refuse) {
  host_ctx *h = host_of(b);
  if (h)
    atomic_store(&h->no_wait, refuse);
}

uint64_t aa_backend_host_stream_period(aa_backend *b, aa_stream stream, uint64_t *deps,
                                       int *ndeps) {
  host_ctx *h = host_of(b);
  uint64_t p = 0;
  if (ndeps)
    *ndeps = 0;
  if (h == NULL)
    return 0;
  pthread_mutex_lock(&h->mu);
  p = busy_period(h, stream);
  int w = waiting_slot(h, stream, false);
  for (int j = 0; w >= 0 && deps && ndeps && j < h->waiting[w].n; j++)
    deps[(*ndeps)++] = h->waiting[w].deps[j];
  pthread_mutex_unlock(&h->mu);
  return p;
}

bool aa_backend_host_stream_ordered(aa_backend *b, aa_stream stream, uint64_t period) {
  host_ctx *h = host_of(b);
  bool ok = true;
  if (h == NULL || period == 0)
    return true;
  pthread_mutex_lock(&h->mu);
  if (period_active(h, period) && busy_period(h, stream) != period) {
    int w = waiting_slot(h, stream, false);
    ok = false;
    for (int j = 0; w >= 0 && j < h->waiting[w].n; j++)
      ok = ok || h->waiting[w].deps[j] == period;
  }
  pthread_mutex_unlock(&h->mu);
  return ok;
}

uint64_t aa_backend_host_stream_queries(const aa_backend *b) {
  host_ctx *h = host_of(b);
  return h ? atomic_load(&h->queries) : 0;
}

void aa_backend_host_counts(const aa_backend *b, uint64_t *allocs, uint64_t *frees,
                            uint64_t *bytes_mapped) {
  host_ctx *h = host_of(b);
  if (allocs)
    *allocs = h ? atomic_load(&h->allocs) : 0;
  if (frees)
    *frees = h ? atomic_load(&h->frees) : 0;
  if (bytes_mapped)
    *bytes_mapped = h ? atomic_load(&h->bytes_mapped) : 0;
}

int aa_backend_host_aliasable(aa_backend *b) {
  host_ctx *h = host_of(b);
  if (h == NULL || atomic_load(&h->bytes_mapped) != 0)
    return AA_EINVAL;
  (void)pthread_once(&host_alias_once, host_alias_ops_init);
  h->shared = true;
  b->ops = &host_alias_ops;
  return AA_OK;
}

int aa_backend_host_alias_per_handle(aa_backend *b) {
  host_ctx *h = host_of(b);
  if (h == NULL || b->ops != &host_alias_ops)
    return AA_EINVAL;
  b->ops = &host_alias1_ops;
  return AA_OK;
}

void aa_backend_host_alias_counts(const aa_backend *b, uint64_t *aliases, uint64_t *unaliases) {
  host_ctx *h = host_of(b);
  *aliases = h ? atomic_load(&h->aliases) : 0;
  *unaliases = h ? atomic_load(&h->unaliases) : 0;
}

uint64_t aa_backend_host_alias_runs(const aa_backend *b) {
  host_ctx *h = host_of(b);
  return h ? atomic_load(&h->alias_runs) : 0;
}

void aa_backend_host_event_counts(const aa_backend *b, uint64_t *recorded,
                                  uint64_t *outstanding) {
  host_ctx *h = host_of(b);
  if (recorded)
    *recorded = h ? atomic_load(&h->ev_recorded) : 0;
  if (outstanding) {
    *outstanding = 0;
    if (h) {
      pthread_mutex_lock(&h->mu);
      *outstanding = h->ev_outstanding;
      pthread_mutex_unlock(&h->mu);
    }
  }
}

void aa_backend_destroy(aa_backend *b) {
  if (b == NULL || b->ops == NULL || b->ops->destroy == NULL)
    return;
  b->ops->destroy(b);
}
