/*
 * _C.c — adaptalloc._C, the CPython extension over the C API: the runtime
 * (configure, start, stats, policy, HTTP address, run id, shutdown), pool blocks that
 * Python can see as buffers (host and pinned, for adaptalloc.torch's pinned
 * tensors), mapped device addresses and the transfer packer.
 *
 * Everything here translates arguments and error codes; the behaviour lives
 * in libadaptalloc. One concern, the binding, kept in one file (CPython's
 * module table wants every function beside it) though it runs past 600
 * lines. Errors come back as (code, message) or as exceptions the
 * Python layer (adaptalloc/__init__.py) names; nothing here prints.
 *
 * Ownership: a Block owns one pool block and returns it when the Block dies
 * (pinned blocks through aa_staging_put, so a copy still reading it finishes
 * before the block is handed out again). A Packer owns an aa_packer. Both
 * refuse to touch the pools once shutdown() ran (the pools are gone then).
 *
 * The one module that binds staging, the packer and the runtime: the
 * package's tensor side, adaptalloc._torch_ext, reaches them only through
 * this module's C API (the capsule _C_API, adaptalloc_capi.h), under the
 * same rules (nothing touches a pool after shutdown()).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "adaptalloc/core.h"
#include "adaptalloc/cuda.h"
#include "adaptalloc/transfer.h"
#include "adaptalloc/runtime.h"
#include "adaptalloc_capi.h"

/* Set once shutdown() has run: pools are destroyed, blocks must not be
 * returned to them. */
static atomic_int g_shut;

static PyObject *err_from(int rc, const char *what) {
  if (rc == AA_EINVAL)
    return PyErr_Format(PyExc_ValueError, "adaptalloc: %s: %s", what, aa_strerror(rc));
  if (rc == AA_ENOMEM)
    return PyErr_Format(PyExc_MemoryError, "adaptalloc: %s: %s", what, aa_strerror(rc));
  return PyErr_Format(PyExc_RuntimeError, "adaptalloc: %s: %s (%s)", what,
                      aa_strerror(rc), aa_errname(rc));
}

static int refuse_after_shutdown(void) {
  if (atomic_load(&g_shut)) {
    PyErr_SetString(PyExc_RuntimeError,
                    "adaptalloc: the runtime was shut down in this process");
    return -1;
  }
  return 0;
}

static int stream_arg(PyObject *o, aa_stream *out) {
  unsigned long long v;
  if (o == NULL || o == Py_None) {
    *out = NULL;
    return 0;
  }
  if (!PyLong_Check(o)) {
    PyErr_Format(PyExc_TypeError,
                 "adaptalloc: a stream must be an int (cudaStream_t), not %s",
                 Py_TYPE(o)->tp_name);
    return -1;
  }
  v = PyLong_AsUnsignedLongLong(o);
  if (PyErr_Occurred()) {
    if (!PyErr_ExceptionMatches(PyExc_OverflowError))
      return -1;
    PyErr_Clear();
    PyErr_SetString(PyExc_ValueError,
                    "adaptalloc: a stream must be a cudaStream_t value (an int >= 0 that fits "
                    "in a pointer)");
    return -1;
  }
  if ((unsigned long long)(uintptr_t)v != v) {
    PyErr_SetString(PyExc_ValueError,
                    "adaptalloc: a stream must be a cudaStream_t value (an int >= 0 that fits "
                    "in a pointer)");
    return -1;
  }
  *out = (aa_stream)(uintptr_t)v;
  return 0;
}

/* ------------------------------------------------------------- runtime */

static PyObject *py_start(PyObject *self, PyObject *args, PyObject *kw) {
  static char *kwlist[] = {"quiet", NULL};
  aa_runtime_config cfg;
  int quiet = 0, rc;
  (void)self;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "|p", kwlist, &quiet))
    return NULL;
  if (refuse_after_shutdown())
    return NULL;
  aa_runtime_config_init(&cfg);
  cfg.quiet = quiet != 0;
  Py_BEGIN_ALLOW_THREADS
  rc = aa_runtime_init(&cfg);
  Py_END_ALLOW_THREADS
  if (rc != AA_OK)
    return err_from(rc, "cannot start the runtime");
  Py_RETURN_NONE;
}

/* An optional keyword: None leaves *out alone; a bool sets 1/0. */
static int opt_bool(PyObject *o, const char *name, int *out) {
  if (o == NULL || o == Py_None)
    return 0;
  if (!PyBool_Check(o)) {
    PyErr_Format(PyExc_TypeError, "adaptalloc: %s= must be True or False, not %s", name,
                 Py_TYPE(o)->tp_name);
    return -1;
  }
  *out = o == Py_True;
  return 0;
}

/* An optional keyword: None leaves *out alone; an int in [lo, hi] sets it. */
static int opt_int(PyObject *o, const char *name, long lo, long hi, int *out) {
  long v;
  if (o == NULL || o == Py_None)
    return 0;
  if (!PyLong_Check(o) || PyBool_Check(o)) {
    PyErr_Format(PyExc_TypeError, "adaptalloc: %s= must be an int, not %s", name,
                 Py_TYPE(o)->tp_name);
    return -1;
  }
  v = PyLong_AsLong(o);
  if ((v == -1 && PyErr_Occurred()) || v < lo || v > hi) {
    PyErr_Clear();
    PyErr_Format(PyExc_ValueError, "adaptalloc: %s= must be from %ld to %ld", name, lo, hi);
    return -1;
  }
  *out = (int)v;
  return 0;
}

/* configure(model=, policy=, policy_dir=, db=, http=, token=, trace=,
 * quiet=, rank=, local_rank=, world_size=): the default runtime's
 * configuration (aa_runtime_configure): the environment
 * (aa_runtime_config_from_env) with the keywords that are not None on top.
 * Strings are taken as given ("off" for db/http turns them off): the rules
 * (plain model name, token bytes, lengths) apply when the runtime starts,
 * as for the environment. RuntimeError once the runtime has started. */
static PyObject *py_configure(PyObject *self, PyObject *args, PyObject *kw) {
  static char *kwlist[] = {"model", "policy", "policy_dir", "db", "http", "token",
                           "trace", "quiet", "rank", "local_rank", "world_size", NULL};
  const char *model = NULL, *policy = NULL, *policy_dir = NULL, *db = NULL, *http = NULL,
             *token = NULL;
  PyObject *trace = NULL, *quiet = NULL, *rank = NULL, *local_rank = NULL, *world = NULL;
  aa_runtime_config cfg;
  int q = -1, rc;
  (void)self;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "|zzzzzzOOOOO", kwlist, &model, &policy,
                                   &policy_dir, &db, &http, &token, &trace, &quiet, &rank,
                                   &local_rank, &world))
    return NULL;
  if (refuse_after_shutdown())
    return NULL;
  aa_runtime_config_from_env(&cfg);
  if (opt_bool(trace, "trace", &cfg.trace) < 0 || opt_bool(quiet, "quiet", &q) < 0 ||
      opt_int(rank, "rank", 0, 1L << 30, &cfg.rank) < 0 ||
      opt_int(local_rank, "local_rank", 0, 65535, &cfg.local_rank) < 0 ||
      opt_int(world, "world_size", 1, 1L << 30, &cfg.world_size) < 0)
    return NULL;
  if (q >= 0)
    cfg.quiet = q != 0;
  if (model != NULL)
    cfg.model = model;
  if (policy != NULL)
    cfg.policy_path = policy;
  if (policy_dir != NULL)
    cfg.policy_dir = policy_dir;
  if (db != NULL)
    cfg.db = db;
  if (http != NULL)
    cfg.http = http;
  if (token != NULL)
    cfg.token = token;
  rc = aa_runtime_configure(&cfg);
  if (rc == AA_EBUSY) {
    PyErr_SetString(PyExc_RuntimeError,
                    "adaptalloc: the runtime already started; its configuration cannot "
                    "change now");
    return NULL;
  }
  if (rc != AA_OK)
    return err_from(rc, "cannot configure the runtime");
  Py_RETURN_NONE;
}

static PyObject *py_shutdown(PyObject *self, PyObject *noargs) {
  (void)self;
  (void)noargs;
  atomic_store(&g_shut, 1);
  Py_BEGIN_ALLOW_THREADS
  aa_runtime_shutdown();
  Py_END_ALLOW_THREADS
  Py_RETURN_NONE;
}

static PyObject *py_is_shut_down(PyObject *self, PyObject *noargs) {
  (void)self;
  (void)noargs;
  return PyBool_FromLong(atomic_load(&g_shut));
}

static PyObject *py_started(PyObject *self, PyObject *noargs) {
  (void)self;
  (void)noargs;
  return PyBool_FromLong(aa_runtime_started());
}

static PyObject *py_stats_json(PyObject *self, PyObject *noargs) {
  char *out = NULL;
  size_t len = 0;
  PyObject *s;
  int rc;
  (void)self;
  (void)noargs;
  if (refuse_after_shutdown())
    return NULL;
  Py_BEGIN_ALLOW_THREADS
  rc = aa_runtime_stats_json(&out, &len);
  Py_END_ALLOW_THREADS
  if (rc != AA_OK)
    return err_from(rc, "stats");
  s = PyUnicode_DecodeUTF8(out, (Py_ssize_t)len, "replace");
  free(out);
  return s;
}

static PyObject *py_policy_json(PyObject *self, PyObject *noargs) {
  char *out = NULL;
  uint64_t version = 0;
  PyObject *r;
  int rc;
  (void)self;
  (void)noargs;
  if (refuse_after_shutdown())
    return NULL;
  Py_BEGIN_ALLOW_THREADS
  rc = aa_runtime_policy_json(&out, &version);
  Py_END_ALLOW_THREADS
  if (rc != AA_OK)
    return err_from(rc, "policy");
  r = Py_BuildValue("(sK)", out, (unsigned long long)version);
  free(out);
  return r;
}

/* policy_update(doc, patch, if_match, source) -> (rc, version, message) */
static PyObject *py_policy_update(PyObject *self, PyObject *args) {
  const char *doc, *source;
  Py_ssize_t len;
  int patch, rc;
  unsigned long long if_match;
  uint64_t version = 0;
  char err[1024];
  (void)self;
  if (!PyArg_ParseTuple(args, "s#pKs", &doc, &len, &patch, &if_match, &source))
    return NULL;
  if (refuse_after_shutdown())
    return NULL;
  err[0] = '\0';
  Py_BEGIN_ALLOW_THREADS
  rc = aa_runtime_policy_update(doc, (size_t)len, patch != 0, source, if_match,
                                &version, err, sizeof(err));
  Py_END_ALLOW_THREADS
  return Py_BuildValue("(iKs)", rc, (unsigned long long)version,
                       err[0] ? err : aa_strerror(rc));
}

static PyObject *py_http_port(PyObject *self, PyObject *noargs) {
  (void)self;
  (void)noargs;
  return PyLong_FromLong(aa_runtime_http_port());
}

static PyObject *py_http_address(PyObject *self, PyObject *noargs) {
  char buf[300];
  (void)self;
  (void)noargs;
  if (aa_runtime_http_address(buf, sizeof(buf)) != AA_OK)
    Py_RETURN_NONE;
  return PyUnicode_FromString(buf);
}

static PyObject *py_token_file(PyObject *self, PyObject *noargs) {
  char buf[1200];
  (void)self;
  (void)noargs;
  if (aa_runtime_token_file(buf, sizeof(buf)) != AA_OK)
    Py_RETURN_NONE;
  return PyUnicode_DecodeFSDefault(buf);
}

static PyObject *py_run_id(PyObject *self, PyObject *noargs) {
  (void)self;
  (void)noargs;
  return PyLong_FromLongLong((long long)aa_runtime_run_id());
}

/* region_id(name) -> int: registers a region name (aa_runtime_region_id).
 * ValueError for a bad name, RuntimeError past the bound; both name why. */
static PyObject *py_region_id(PyObject *self, PyObject *arg) {
  char err[256];
  const char *name;
  Py_ssize_t len = 0;
  int id = -1, rc;
  (void)self;
  if (!PyUnicode_Check(arg))
    return PyErr_Format(PyExc_TypeError, "adaptalloc: a region name must be a str, not %s",
                        Py_TYPE(arg)->tp_name);
  name = PyUnicode_AsUTF8AndSize(arg, &len);
  if (name == NULL)
    return NULL;
  if ((size_t)len != strlen(name))
    return PyErr_Format(PyExc_ValueError, "adaptalloc: region %R: not a region name: "
                                          "it holds a NUL character",
                        arg);
  rc = aa_runtime_region_id(name, &id, err, sizeof(err));
  if (rc == AA_EINVAL)
    return PyErr_Format(PyExc_ValueError, "adaptalloc: region %R: %s", arg, err);
  if (rc != AA_OK)
    return PyErr_Format(PyExc_RuntimeError, "adaptalloc: region %R: %s", arg, err);
  return PyLong_FromLong(id);
}

static PyObject *py_strerror(PyObject *self, PyObject *arg) {
  long rc;
  (void)self;
  rc = PyLong_AsLong(arg);
  if (rc == -1 && PyErr_Occurred())
    return NULL;
  return Py_BuildValue("(ss)", aa_errname((int)rc), aa_strerror((int)rc));
}

static PyObject *py_cuda_device_count(PyObject *self, PyObject *noargs) {
  int n;
  (void)self;
  (void)noargs;
  Py_BEGIN_ALLOW_THREADS
  n = aa_cuda_device_count();
  Py_END_ALLOW_THREADS
  return PyLong_FromLong(n < 0 ? 0 : n);
}

/* default_stream(device) -> the handle of CUDA device `device`'s default
 * stream (aa_stream_default): unlike 0, it names the device, so that a pool
 * used from several GPUs (pinned memory) orders each block after the right
 * device's queue. */
static PyObject *py_default_stream(PyObject *self, PyObject *arg) {
  long d;
  (void)self;
  d = PyLong_AsLong(arg);
  if (d == -1 && PyErr_Occurred())
    return NULL;
  if (d < 0 || d >= AA_STREAM_DEFAULT_DEVICES) {
    PyErr_Format(PyExc_ValueError, "adaptalloc: default_stream: device %ld is not in 0..%d", d,
                 AA_STREAM_DEFAULT_DEVICES - 1);
    return NULL;
  }
  return PyLong_FromUnsignedLongLong((unsigned long long)(uintptr_t)aa_stream_default((int)d));
}

static PyObject *py_pinned_device_ptr(PyObject *self, PyObject *arg) {
  unsigned long long host;
  void *dev = NULL;
  int rc;
  (void)self;
  host = PyLong_AsUnsignedLongLong(arg);
  if (PyErr_Occurred())
    return NULL;
  rc = aa_pinned_device_ptr((const void *)(uintptr_t)host, &dev);
  if (rc != AA_OK)
    return err_from(rc, "no device address for that host pointer (not mapped pinned memory)");
  return PyLong_FromUnsignedLongLong((unsigned long long)(uintptr_t)dev);
}

/* pinned_record_stream(address, stream): a block of the pinned pool is also
 * used on `stream` (Tensor.record_stream's meaning): when it is freed it is
 * reused only after that stream's work up to then has completed. */
static PyObject *py_pinned_record_stream(PyObject *self, PyObject *args) {
  unsigned long long addr;
  PyObject *stream;
  aa_stream s;
  aa_pool *pool;
  int rc;
  (void)self;
  if (!PyArg_ParseTuple(args, "KO", &addr, &stream))
    return NULL;
  if (stream_arg(stream, &s) < 0 || refuse_after_shutdown())
    return NULL;
  pool = aa_runtime_pool(AA_BACKEND_PINNED, 0);
  if (pool == NULL || aa_block_size(pool, (const void *)(uintptr_t)addr) == 0) {
    PyErr_SetString(PyExc_ValueError,
                    "adaptalloc: record_stream: that memory is not a block of the pinned pool");
    return NULL;
  }
  rc = aa_record_stream(pool, (void *)(uintptr_t)addr, s);
  if (rc != AA_OK)
    return err_from(rc, "record_stream");
  Py_RETURN_NONE;
}

/* ------------------------------------------------------- managed memory */

/* A location argument: a CUDA ordinal, or -1 (AA_MANAGED_HOST) for the host. */
static int location_arg(int loc) {
  if (loc == AA_MANAGED_HOST || (loc >= 0 && loc < AA_MAX_DEVICES))
    return 0;
  PyErr_Format(PyExc_ValueError,
               "adaptalloc: a location is a CUDA ordinal or -1 (the host), not %d", loc);
  return -1;
}

/* managed_prefetch(address, size, location, stream): cudaMemPrefetchAsync of
 * managed memory to a device or (-1) the host, on stream. */
static PyObject *py_managed_prefetch(PyObject *self, PyObject *args) {
  unsigned long long addr;
  Py_ssize_t size;
  int loc, rc;
  PyObject *stream;
  aa_stream s;
  (void)self;
  if (!PyArg_ParseTuple(args, "KniO", &addr, &size, &loc, &stream))
    return NULL;
  if (size <= 0)
    return PyErr_Format(PyExc_ValueError, "adaptalloc: prefetch size must be > 0, got %zd",
                        size);
  if (location_arg(loc) < 0 || stream_arg(stream, &s) < 0)
    return NULL;
  Py_BEGIN_ALLOW_THREADS
  rc = aa_managed_prefetch(NULL, (const void *)(uintptr_t)addr, (size_t)size, loc, s);
  Py_END_ALLOW_THREADS
  if (rc == AA_EINVAL)
    return PyErr_Format(PyExc_ValueError,
                        "adaptalloc: prefetch: that memory is not managed memory, or "
                        "device %d is not there",
                        loc);
  if (rc != AA_OK)
    return err_from(rc, "prefetch of managed memory");
  Py_RETURN_NONE;
}

static int location_name(const char *name, aa_managed_location *out) {
  if (strcmp(name, "none") == 0)
    *out = AA_MANAGED_LOC_NONE;
  else if (strcmp(name, "device") == 0)
    *out = AA_MANAGED_LOC_DEVICE;
  else if (strcmp(name, "host") == 0)
    *out = AA_MANAGED_LOC_HOST;
  else {
    PyErr_Format(PyExc_ValueError,
                 "adaptalloc: a location is 'none', 'device' or 'host', not '%s'", name);
    return -1;
  }
  return 0;
}

/* managed_advise(address, size, device, preferred_location, accessed_by,
 * read_mostly): cudaMemAdvise ('none'/'device'/'host'; 'device' is device). */
static PyObject *py_managed_advise(PyObject *self, PyObject *args) {
  unsigned long long addr;
  Py_ssize_t size;
  const char *pref, *acc;
  int device, rm, rc;
  aa_managed_config c;
  (void)self;
  if (!PyArg_ParseTuple(args, "Knissp", &addr, &size, &device, &pref, &acc, &rm))
    return NULL;
  aa_managed_config_init(&c);
  if (size <= 0)
    return PyErr_Format(PyExc_ValueError, "adaptalloc: advise size must be > 0, got %zd",
                        size);
  if (device < 0 || device >= AA_MAX_DEVICES)
    return PyErr_Format(PyExc_ValueError, "adaptalloc: device %d is not a CUDA ordinal",
                        device);
  if (location_name(pref, &c.preferred_location) < 0 ||
      location_name(acc, &c.accessed_by) < 0)
    return NULL;
  c.device = device;
  c.read_mostly = rm != 0;
  Py_BEGIN_ALLOW_THREADS
  rc = aa_managed_advise((const void *)(uintptr_t)addr, (size_t)size, &c);
  Py_END_ALLOW_THREADS
  if (rc == AA_EINVAL)
    return PyErr_Format(PyExc_ValueError,
                        "adaptalloc: advise: that memory is not managed memory, or "
                        "device %d is not there",
                        device);
  if (rc != AA_OK)
    return err_from(rc, "advice for managed memory");
  Py_RETURN_NONE;
}

/* A location as Python sees it: the ordinal, -1 for the host, None unset. */
static PyObject *loc_obj(int loc) {
  if (loc == AA_MANAGED_UNSET) {
    Py_INCREF(Py_None);
    return Py_None;
  }
  return PyLong_FromLong(loc);
}

/* managed_range_info(address, size) -> dict: what the driver says of a
 * managed range (cudaMemRangeGetAttribute); locations are ordinals, -1 the
 * host, None unset or mixed. */
static PyObject *py_managed_range_info(PyObject *self, PyObject *args) {
  unsigned long long addr;
  Py_ssize_t size;
  aa_managed_range r;
  PyObject *acc, *d;
  int rc;
  (void)self;
  if (!PyArg_ParseTuple(args, "Kn", &addr, &size))
    return NULL;
  if (size <= 0)
    return PyErr_Format(PyExc_ValueError, "adaptalloc: range size must be > 0, got %zd",
                        size);
  Py_BEGIN_ALLOW_THREADS
  rc = aa_managed_range_info((const void *)(uintptr_t)addr, (size_t)size, &r);
  Py_END_ALLOW_THREADS
  if (rc == AA_EINVAL)
    return PyErr_Format(PyExc_ValueError, "adaptalloc: that memory is not managed memory");
  if (rc != AA_OK)
    return err_from(rc, "managed range attributes");
  acc = PyList_New(0);
  if (acc == NULL)
    return NULL;
  for (uint32_t i = 0; i < r.n_accessed_by && i < 8; i++) {
    PyObject *v = PyLong_FromLong(r.accessed_by[i]);
    if (v == NULL || PyList_Append(acc, v) < 0) {
      Py_XDECREF(v);
      Py_DECREF(acc);
      return NULL;
    }
    Py_DECREF(v);
  }
  d = Py_BuildValue("{s:N,s:N,s:O,s:N}", "preferred_location", loc_obj(r.preferred_location),
                    "last_prefetch_location", loc_obj(r.last_prefetch_location),
                    "read_mostly", r.read_mostly ? Py_True : Py_False, "accessed_by", acc);
  return d;
}

/* --------------------------------------------------------------- Block */

typedef struct {
  PyObject_HEAD
      aa_pool *pool;
  void *ptr;
  size_t size;
  int kind; /* AA_BACKEND_HOST, AA_BACKEND_PINNED, or AA_BACKEND_DEVICE for a
               managed block (the only device memory a Block holds) */
  aa_stream last_use;
  Py_ssize_t exports;
} Block;

/* The managed pool a Block comes from: the runtime's for `device`
 * (region < 0), or region's pool on that device, which must be managed. */
static aa_pool *managed_pool_for(int device, int region) {
  aa_pool *pool;
  Py_BEGIN_ALLOW_THREADS
  pool = region < 0 ? aa_runtime_managed_pool(device)
                    : aa_runtime_region_pool(region, AA_BACKEND_DEVICE, device);
  Py_END_ALLOW_THREADS
  if (pool == NULL) {
    PyErr_Format(PyExc_RuntimeError,
                 "adaptalloc: no managed-memory pool for device %d%s (no CUDA, no such "
                 "GPU, no managed-memory support, or the runtime's limit of pools: "
                 "see stderr)",
                 device, region < 0 ? "" : " in that region");
    return NULL;
  }
  if (!aa_backend_is_managed(aa_pool_backend(pool))) {
    PyErr_Format(PyExc_ValueError,
                 "adaptalloc: region %s is not managed memory: its policy section "
                 "(pools.regions.%s, else pools.device) does not say backend \"managed\"",
                 aa_runtime_region_name(region), aa_runtime_region_name(region));
    return NULL;
  }
  return pool;
}

/* MemoryError for a failed managed allocation: the safety cap's words when
 * it refused (its refusal count moved), else plain out of memory. */
static void managed_alloc_error(aa_pool *pool, uint64_t refusals_before,
                                Py_ssize_t size) {
  aa_managed_refusal f;
  if (aa_managed_last_refusal(aa_pool_backend(pool), &f) == AA_OK &&
      f.count > refusals_before) {
    PyErr_Format(PyExc_MemoryError,
                 "adaptalloc: managed memory: %s (pool %s, %zd bytes asked; set "
                 "allow_oversubscribe: true in the policy section to go beyond free "
                 "device memory, at the risk of hanging a shared GPU)",
                 f.message, aa_pool_name(pool), size);
    return;
  }
  PyErr_Format(PyExc_MemoryError,
               "adaptalloc: out of managed memory allocating %zd bytes (pool %s)", size,
               aa_pool_name(pool));
}

static int block_init(Block *self, PyObject *args, PyObject *kw) {
  static char *kwlist[] = {"kind", "size", "stream", "device", "region", NULL};
  const char *kind;
  Py_ssize_t size;
  PyObject *stream = NULL;
  int device = 0, region = -1;
  aa_pool *pool;
  void *ptr;

  if (self->ptr != NULL) {
    PyErr_SetString(PyExc_RuntimeError, "adaptalloc: Block already holds memory");
    return -1;
  }
  if (!PyArg_ParseTupleAndKeywords(args, kw, "sn|Oii", kwlist, &kind, &size, &stream,
                                   &device, &region))
    return -1;
  if (size <= 0) {
    PyErr_Format(PyExc_ValueError, "adaptalloc: block size must be > 0, got %zd", size);
    return -1;
  }
  if (strcmp(kind, "pinned") == 0) {
    self->kind = AA_BACKEND_PINNED;
  } else if (strcmp(kind, "host") == 0) {
    self->kind = AA_BACKEND_HOST;
  } else if (strcmp(kind, "managed") == 0) {
    self->kind = AA_BACKEND_DEVICE;
  } else {
    PyErr_Format(PyExc_ValueError,
                 "adaptalloc: block kind must be 'pinned', 'host' or 'managed', not '%s'",
                 kind);
    return -1;
  }
  if (stream_arg(stream, &self->last_use) < 0)
    return -1;
  if (refuse_after_shutdown())
    return -1;
  if (self->kind == AA_BACKEND_DEVICE) {
    aa_managed_refusal f;
    if (device < 0 || device >= AA_MAX_DEVICES) {
      PyErr_Format(PyExc_ValueError, "adaptalloc: device %d is not a CUDA ordinal", device);
      return -1;
    }
    pool = managed_pool_for(device, region);
    if (pool == NULL)
      return -1;
    (void)aa_managed_last_refusal(aa_pool_backend(pool), &f);
    Py_BEGIN_ALLOW_THREADS
    ptr = aa_alloc(pool, (size_t)size, self->last_use);
    Py_END_ALLOW_THREADS
    if (ptr == NULL) {
      managed_alloc_error(pool, f.count, size);
      return -1;
    }
    self->pool = pool;
    self->ptr = ptr;
    self->size = (size_t)size;
    return 0;
  }
  Py_BEGIN_ALLOW_THREADS
  pool = aa_runtime_pool((aa_backend_kind)self->kind, 0);
  ptr = NULL;
  if (pool != NULL)
    ptr = self->kind == AA_BACKEND_PINNED ? aa_staging_get(pool, (size_t)size)
                                          : aa_alloc(pool, (size_t)size, NULL);
  Py_END_ALLOW_THREADS
  if (pool == NULL) {
    PyErr_Format(PyExc_RuntimeError,
                 "adaptalloc: no %s pool in this process (%s)", kind,
                 self->kind == AA_BACKEND_PINNED ? "no CUDA or no GPU" : "see stderr");
    return -1;
  }
  if (ptr == NULL) {
    PyErr_Format(PyExc_MemoryError, "adaptalloc: out of %s memory allocating %zd bytes",
                 kind, size);
    return -1;
  }
  self->pool = pool;
  self->ptr = ptr;
  self->size = (size_t)size;
  return 0;
}

static void block_dealloc(Block *self) {
  if (self->ptr != NULL && !atomic_load(&g_shut)) {
    if (self->kind == AA_BACKEND_PINNED)
      (void)aa_staging_put(self->pool, self->ptr, self->size, self->last_use);
    else if (self->kind == AA_BACKEND_DEVICE) /* managed: stream-ordered reuse */
      (void)aa_free(self->pool, self->ptr, self->size, self->last_use);
    else
      (void)aa_free(self->pool, self->ptr, self->size, NULL);
  }
  self->ptr = NULL;
  Py_TYPE(self)->tp_free((PyObject *)self);
}

static int block_getbuffer(Block *self, Py_buffer *view, int flags) {
  if (self->ptr == NULL) {
    PyErr_SetString(PyExc_BufferError, "adaptalloc: empty Block");
    view->obj = NULL;
    return -1;
  }
  if (PyBuffer_FillInfo(view, (PyObject *)self, self->ptr, (Py_ssize_t)self->size, 0,
                        flags) < 0)
    return -1;
  self->exports++;
  return 0;
}

static void block_releasebuffer(Block *self, Py_buffer *view) {
  (void)view;
  self->exports--;
}

static PyBufferProcs block_as_buffer = {
    (getbufferproc)block_getbuffer,
    (releasebufferproc)block_releasebuffer,
};

static PyObject *block_address(Block *self, void *closure) {
  (void)closure;
  return PyLong_FromUnsignedLongLong((unsigned long long)(uintptr_t)self->ptr);
}

static PyObject *block_size(Block *self, void *closure) {
  (void)closure;
  return PyLong_FromSize_t(self->size);
}

static PyObject *block_kind(Block *self, void *closure) {
  (void)closure;
  return PyUnicode_FromString(self->kind == AA_BACKEND_PINNED   ? "pinned"
                              : self->kind == AA_BACKEND_DEVICE ? "managed"
                                                                : "host");
}

static PyObject *block_capacity(Block *self, void *closure) {
  size_t n = 0;
  (void)closure;
  if (self->ptr != NULL && !atomic_load(&g_shut))
    n = aa_block_size(self->pool, self->ptr);
  return PyLong_FromSize_t(n);
}

static PyObject *block_device_address(Block *self, void *closure) {
  void *dev = NULL;
  int rc;
  (void)closure;
  if (self->kind == AA_BACKEND_DEVICE) /* managed: one address everywhere */
    return PyLong_FromUnsignedLongLong((unsigned long long)(uintptr_t)self->ptr);
  if (self->kind != AA_BACKEND_PINNED) {
    PyErr_SetString(PyExc_ValueError,
                    "adaptalloc: only pinned and managed blocks have a device address");
    return NULL;
  }
  rc = aa_pinned_device_ptr(self->ptr, &dev);
  if (rc != AA_OK)
    return err_from(rc, "device address of a pinned block");
  return PyLong_FromUnsignedLongLong((unsigned long long)(uintptr_t)dev);
}

/* The stream of the last copy that reads or writes the block; it is reused
 * only after that stream's work up to its death has completed. */
static PyObject *block_set_last_use(Block *self, PyObject *arg) {
  if (stream_arg(arg, &self->last_use) < 0)
    return NULL;
  Py_RETURN_NONE;
}

/* Another stream that uses the block (Tensor.record_stream's meaning). */
static PyObject *block_record_stream(Block *self, PyObject *arg) {
  aa_stream s;
  int rc;
  if (stream_arg(arg, &s) < 0)
    return NULL;
  if (self->kind != AA_BACKEND_PINNED) {
    PyErr_SetString(PyExc_ValueError, "adaptalloc: record_stream needs a pinned block");
    return NULL;
  }
  if (refuse_after_shutdown())
    return NULL;
  rc = aa_record_stream(self->pool, self->ptr, s);
  if (rc != AA_OK)
    return err_from(rc, "record_stream");
  Py_RETURN_NONE;
}

static PyGetSetDef block_getset[] = {
    {"address", (getter)block_address, NULL, "host address of the block", NULL},
    {"size", (getter)block_size, NULL, "bytes asked for", NULL},
    {"capacity", (getter)block_capacity, NULL, "bytes of the pool block (class size)", NULL},
    {"kind", (getter)block_kind, NULL, "'pinned', 'host' or 'managed'", NULL},
    {"device_address", (getter)block_device_address, NULL,
     "device address of a pinned block (mapped, zero-copy) or a managed one", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMethodDef block_methods[] = {
    {"set_last_use", (PyCFunction)block_set_last_use, METH_O,
     "set_last_use(stream): the stream of the last copy using the block"},
    {"record_stream", (PyCFunction)block_record_stream, METH_O,
     "record_stream(stream): the block is also used on this stream"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject BlockType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "adaptalloc._C.Block",
    .tp_basicsize = sizeof(Block),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Block(kind, size, stream=None, device=0, region=-1): one block of the "
              "runtime's 'pinned' or 'host' pool, or of a 'managed' pool (the device's, "
              "or region id's), a writable buffer; returned to the pool when it dies.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)block_init,
    .tp_dealloc = (destructor)block_dealloc,
    .tp_as_buffer = &block_as_buffer,
    .tp_getset = block_getset,
    .tp_methods = block_methods,
};

/* -------------------------------------------------------------- Packer */

typedef struct {
  PyObject_HEAD
      aa_packer *pk;
  size_t capacity;
} Packer;

static int packer_init(Packer *self, PyObject *args, PyObject *kw) {
  static char *kwlist[] = {"capacity", NULL};
  Py_ssize_t cap;
  aa_pool *pool;
  aa_packer *pk = NULL;
  int rc;
  if (self->pk != NULL) {
    PyErr_SetString(PyExc_RuntimeError, "adaptalloc: Packer already initialised");
    return -1;
  }
  if (!PyArg_ParseTupleAndKeywords(args, kw, "n", kwlist, &cap))
    return -1;
  if (cap <= 0) {
    PyErr_Format(PyExc_ValueError, "adaptalloc: packer capacity must be > 0, got %zd", cap);
    return -1;
  }
  if (refuse_after_shutdown())
    return -1;
  Py_BEGIN_ALLOW_THREADS
  pool = aa_runtime_pool(AA_BACKEND_PINNED, 0);
  rc = pool != NULL ? aa_packer_new(pool, (size_t)cap, &pk) : AA_ENOTSUP;
  Py_END_ALLOW_THREADS
  if (rc != AA_OK) {
    err_from(rc, pool == NULL ? "no pinned pool (no CUDA or no GPU)" : "cannot make a packer");
    return -1;
  }
  self->pk = pk;
  self->capacity = (size_t)cap;
  return 0;
}

static void packer_dealloc(Packer *self) {
  if (self->pk != NULL && !atomic_load(&g_shut)) {
    Py_BEGIN_ALLOW_THREADS
    aa_packer_destroy(self->pk);
    Py_END_ALLOW_THREADS
  }
  self->pk = NULL;
  Py_TYPE(self)->tp_free((PyObject *)self);
}

static int packer_live(Packer *self) {
  if (self->pk == NULL) {
    PyErr_SetString(PyExc_ValueError, "adaptalloc: the packer is closed");
    return -1;
  }
  return refuse_after_shutdown();
}

/* add_many([(address, nbytes), ...]) -> [offset, ...], or None when they do
 * not all fit (nothing packed then). */
static PyObject *packer_add_many(Packer *self, PyObject *seq) {
  PyObject *fast, *res = NULL;
  Py_ssize_t n, i;
  const void **src = NULL;
  size_t *len = NULL, *off = NULL;
  int rc;

  if (packer_live(self))
    return NULL;
  fast = PySequence_Fast(seq, "adaptalloc: add_many takes a sequence of (address, nbytes)");
  if (fast == NULL)
    return NULL;
  n = PySequence_Fast_GET_SIZE(fast);
  if (n == 0) {
    Py_DECREF(fast);
    return PyList_New(0);
  }
  src = PyMem_Malloc((size_t)n * sizeof(*src));
  len = PyMem_Malloc((size_t)n * sizeof(*len));
  off = PyMem_Malloc((size_t)n * sizeof(*off));
  if (src == NULL || len == NULL || off == NULL) {
    PyErr_NoMemory();
    goto out;
  }
  for (i = 0; i < n; i++) {
    unsigned long long a, b;
    if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(fast, i), "KK;adaptalloc: add_many item "
                                                             "must be (address, nbytes)",
                          &a, &b))
      goto out;
    if (a == 0 || b == 0) {
      PyErr_Format(PyExc_ValueError,
                   "adaptalloc: add_many item %zd has a null address or 0 bytes", i);
      goto out;
    }
    src[i] = (const void *)(uintptr_t)a;
    len[i] = (size_t)b;
  }
  Py_BEGIN_ALLOW_THREADS
  rc = aa_packer_add_many(self->pk, src, len, (size_t)n, off);
  Py_END_ALLOW_THREADS
  if (rc == AA_ELIMIT) {
    res = Py_None;
    Py_INCREF(res);
    goto out;
  }
  if (rc != AA_OK) {
    err_from(rc, "pack");
    goto out;
  }
  res = PyList_New(n);
  if (res == NULL)
    goto out;
  for (i = 0; i < n; i++) {
    PyObject *v = PyLong_FromSize_t(off[i]);
    if (v == NULL) {
      Py_CLEAR(res);
      goto out;
    }
    PyList_SET_ITEM(res, i, v);
  }
out:
  PyMem_Free(src);
  PyMem_Free(len);
  PyMem_Free(off);
  Py_DECREF(fast);
  return res;
}

static PyObject *packer_used(Packer *self, PyObject *noargs) {
  (void)noargs;
  if (packer_live(self))
    return NULL;
  return PyLong_FromSize_t(aa_packer_used(self->pk));
}

static PyObject *packer_flush(Packer *self, PyObject *args) {
  unsigned long long dst;
  PyObject *stream;
  aa_stream s;
  int rc;
  if (!PyArg_ParseTuple(args, "KO", &dst, &stream))
    return NULL;
  if (packer_live(self) || stream_arg(stream, &s) < 0)
    return NULL;
  if (dst == 0 && aa_packer_used(self->pk) > 0) {
    PyErr_SetString(PyExc_ValueError, "adaptalloc: flush to a null device address");
    return NULL;
  }
  Py_BEGIN_ALLOW_THREADS
  rc = aa_packer_flush(self->pk, (void *)(uintptr_t)dst, s);
  Py_END_ALLOW_THREADS
  if (rc != AA_OK)
    return err_from(rc, "packer flush (cudaMemcpyAsync)");
  Py_RETURN_NONE;
}

static PyObject *packer_wait(Packer *self, PyObject *stream) {
  aa_stream s;
  int rc;
  if (packer_live(self) || stream_arg(stream, &s) < 0)
    return NULL;
  Py_BEGIN_ALLOW_THREADS
  rc = aa_packer_wait(self->pk, s);
  Py_END_ALLOW_THREADS
  if (rc != AA_OK)
    return err_from(rc, "packer wait");
  Py_RETURN_NONE;
}

static PyObject *packer_sync(Packer *self, PyObject *noargs) {
  int rc;
  (void)noargs;
  if (packer_live(self))
    return NULL;
  Py_BEGIN_ALLOW_THREADS
  rc = aa_packer_sync(self->pk);
  Py_END_ALLOW_THREADS
  if (rc != AA_OK)
    return err_from(rc, "packer sync");
  Py_RETURN_NONE;
}

static PyObject *packer_set_threads(Packer *self, PyObject *arg) {
  long n = PyLong_AsLong(arg);
  if (n == -1 && PyErr_Occurred())
    return NULL;
  if (n < 0) {
    PyErr_SetString(PyExc_ValueError, "adaptalloc: threads must be >= 0");
    return NULL;
  }
  if (packer_live(self))
    return NULL;
  return PyLong_FromUnsignedLong(aa_packer_set_threads(self->pk, (unsigned)n));
}

static PyObject *packer_close(Packer *self, PyObject *noargs) {
  aa_packer *pk = self->pk;
  (void)noargs;
  self->pk = NULL;
  if (pk != NULL && !atomic_load(&g_shut)) {
    Py_BEGIN_ALLOW_THREADS
    aa_packer_destroy(pk);
    Py_END_ALLOW_THREADS
  }
  Py_RETURN_NONE;
}

static PyObject *packer_capacity(Packer *self, void *closure) {
  (void)closure;
  return PyLong_FromSize_t(self->capacity);
}

static PyMethodDef packer_methods[] = {
    {"add_many", (PyCFunction)packer_add_many, METH_O,
     "add_many([(address, nbytes), ...]) -> offsets, or None when they do not all fit"},
    {"used", (PyCFunction)packer_used, METH_NOARGS, "bytes packed in the current buffer"},
    {"flush", (PyCFunction)packer_flush, METH_VARARGS,
     "flush(device_address, stream): one copy of the current buffer"},
    {"wait", (PyCFunction)packer_wait, METH_O,
     "wait(stream): the stream waits on the GPU for the last flush"},
    {"sync", (PyCFunction)packer_sync, METH_NOARGS, "block until every copy completed"},
    {"set_threads", (PyCFunction)packer_set_threads, METH_O,
     "set_threads(n): CPU threads packing large batches (0 = default)"},
    {"close", (PyCFunction)packer_close, METH_NOARGS, "wait for copies, free the buffers"},
    {NULL, NULL, 0, NULL},
};

static PyObject *packer_handle(Packer *self, void *closure) {
  (void)closure;
  return PyLong_FromUnsignedLongLong((unsigned long long)(uintptr_t)self->pk);
}

static PyGetSetDef packer_getset[] = {
    {"capacity", (getter)packer_capacity, NULL, "bytes per buffer", NULL},
    {"handle", (getter)packer_handle, NULL,
     "the aa_packer * as an int (0 when closed), for adaptalloc._torch_ext", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject PackerType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "adaptalloc._C.Packer",
    .tp_basicsize = sizeof(Packer),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Packer(capacity): two pinned buffers of the runtime's pinned pool; "
              "packs host memory and sends it with one copy per flush.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)packer_init,
    .tp_dealloc = (destructor)packer_dealloc,
    .tp_methods = packer_methods,
    .tp_getset = packer_getset,
};

/* -------------------------------------------------------------- module */

static PyMethodDef methods[] = {
    {"start", (PyCFunction)(void (*)(void))py_start, METH_VARARGS | METH_KEYWORDS,
     "start(quiet=False): start the runtime with configure()'s configuration, else the "
     "environment (idempotent)"},
    {"configure", (PyCFunction)(void (*)(void))py_configure, METH_VARARGS | METH_KEYWORDS,
     "configure(model=, policy=, policy_dir=, db=, http=, token=, trace=, quiet=, rank=, "
     "local_rank=, world_size=): the runtime's configuration, the environment with these "
     "on top (before it starts)"},
    {"shutdown", py_shutdown, METH_NOARGS, "stop the runtime; its pools are destroyed"},
    {"is_shut_down", py_is_shut_down, METH_NOARGS, "whether shutdown() ran"},
    {"started", py_started, METH_NOARGS, "whether the runtime runs now"},
    {"stats_json", py_stats_json, METH_NOARGS, "the /stats document"},
    {"policy_json", py_policy_json, METH_NOARGS, "(policy JSON, version)"},
    {"policy_update", py_policy_update, METH_VARARGS,
     "policy_update(doc, patch, if_match, source) -> (rc, version, message)"},
    {"http_port", py_http_port, METH_NOARGS, "bound port, 0 when off"},
    {"http_address", py_http_address, METH_NOARGS, "bound address or None"},
    {"token_file", py_token_file, METH_NOARGS, "the made token's file or None"},
    {"run_id", py_run_id, METH_NOARGS, "store run id, 0 when the store is off"},
    {"strerror", py_strerror, METH_O, "strerror(rc) -> (name, message)"},
    {"region_id", py_region_id, METH_O,
     "region_id(name) -> int: the id of region name, registered on first use"},
    {"cuda_device_count", py_cuda_device_count, METH_NOARGS, "CUDA devices (0 without)"},
    {"default_stream", py_default_stream, METH_O,
     "default_stream(device) -> the stream handle of that device's default stream"},
    {"pinned_record_stream", py_pinned_record_stream, METH_VARARGS,
     "pinned_record_stream(address, stream): the pinned block is used on stream too"},
    {"pinned_device_ptr", py_pinned_device_ptr, METH_O,
     "pinned_device_ptr(host_address) -> device address of mapped pinned memory"},
    {"managed_prefetch", py_managed_prefetch, METH_VARARGS,
     "managed_prefetch(address, size, location, stream): to device `location` or -1 (host)"},
    {"managed_advise", py_managed_advise, METH_VARARGS,
     "managed_advise(address, size, device, preferred_location, accessed_by, read_mostly)"},
    {"managed_range_info", py_managed_range_info, METH_VARARGS,
     "managed_range_info(address, size) -> dict of cudaMemRangeGetAttribute's answers"},
    {NULL, NULL, 0, NULL},
};

/* -------------------------------------------------------------- the C API */

static int capi_live(void) { return !atomic_load(&g_shut) && aa_runtime_started(); }

static aa_pool *capi_pinned_pool(void) {
  return atomic_load(&g_shut) ? NULL : aa_runtime_pool(AA_BACKEND_PINNED, 0);
}

static void capi_staging_put(aa_pool *pinned, void *block, size_t size, aa_stream stream) {
  if (capi_live())
    (void)aa_staging_put(pinned, block, size, stream);
}

static int capi_record(aa_pool *pool, void *ptr, aa_stream stream) {
  return capi_live() ? aa_record_stream(pool, ptr, stream) : AA_ENOTSUP;
}

static void capi_release(aa_pool *pool) {
  if (capi_live())
    (void)aa_pool_release(pool);
}

static const aa_py_capi g_capi = {
    .size = sizeof(aa_py_capi),
    .version = AA_PY_CAPI_VERSION,
    .live = capi_live,
    .pinned_pool = capi_pinned_pool,
    .staging_get = aa_staging_get,
    .staging_put = capi_staging_put,
    .block_size = aa_block_size,
    .record = capi_record,
    .release = capi_release,
    .strerror = aa_strerror,
    .pack = aa_packer_add_many,
    .packed = aa_packer_used,
    .flush = aa_packer_flush,
    .wait = aa_packer_wait,
};

static struct PyModuleDef moduledef = {
    PyModuleDef_HEAD_INIT,
    "adaptalloc._C",
    "The C API of libadaptalloc, as adaptalloc's Python layer uses it.",
    -1,
    methods,
    NULL,
    NULL,
    NULL,
    NULL,
};

PyMODINIT_FUNC PyInit__C(void) {
  PyObject *m, *capi;
  if (PyType_Ready(&BlockType) < 0 || PyType_Ready(&PackerType) < 0)
    return NULL;
  m = PyModule_Create(&moduledef);
  if (m == NULL)
    return NULL;
  /* the table is static: the capsule only points at it */
  capi = PyCapsule_New((void *)&g_capi, AA_PY_CAPI_NAME, NULL);
  if (capi == NULL || PyModule_AddObject(m, "_C_API", capi) < 0) {
    Py_XDECREF(capi);
    Py_DECREF(m);
    return NULL;
  }
  Py_INCREF(&BlockType);
  Py_INCREF(&PackerType);
  if (PyModule_AddObject(m, "Block", (PyObject *)&BlockType) < 0 ||
      PyModule_AddObject(m, "Packer", (PyObject *)&PackerType) < 0 ||
      PyModule_AddIntConstant(m, "OK", AA_OK) < 0 ||
      PyModule_AddIntConstant(m, "EINVAL", AA_EINVAL) < 0 ||
      PyModule_AddIntConstant(m, "EPARSE", AA_EPARSE) < 0 ||
      PyModule_AddIntConstant(m, "ERANGE", AA_ERANGE) < 0 ||
      PyModule_AddIntConstant(m, "ESTALE", AA_ESTALE) < 0 ||
      PyModule_AddIntConstant(m, "ECONFLICT", AA_ECONFLICT) < 0 ||
      PyModule_AddIntConstant(m, "ENOTSUP", AA_ENOTSUP) < 0 ||
      PyModule_AddIntConstant(m, "EBUSY", AA_EBUSY) < 0 ||
      PyModule_AddIntConstant(m, "PACKER_ALIGN", AA_PACKER_ALIGN) < 0) {
    Py_DECREF(m);
    return NULL;
  }
  return m;
}
