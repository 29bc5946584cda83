/*
 * runtime_devices.c — the GPUs the runtime's pools are on, as an operator
 * sees them: which card each one is (UUID, PCI bus id, name: asked once and
 * kept, they never change), its memory now (total and free: cudaMemGetInfo
 * at each read), the part of it this process's pools hold and the rest the
 * driver counts as used (the CUDA context, other libraries, other
 * processes: "non-allocator" memory); and the labels that say which process
 * and which card a pool's series come from (rank, host, gpu_uuid,
 * pci_bus_id), whatever the scrape configuration adds.
 *
 * Entry points: aa__rt_devices_read (the figures), aa__rt_devices_json
 * (/stats "host" and "devices"), aa__rt_devices_metrics (/metrics
 * adaptalloc_device_*), aa__rt_pool_labels (the server's pool_labels),
 * aa__rt_process_labels, aa__rt_host_name, aa__rt_prom_label (the one label
 * escape of the runtime's series); aa__rt_devices_test_probe (tests:
 * a fake GPU without CUDA).
 *
 * Only devices that a pool of this process is on are asked (a CUDA context
 * exists there already): asking any other would create one, hundreds of
 * MiB of the card. Without CUDA (or without a GPU) there are no device
 * pools, so /stats says "devices": [] and /metrics has no device series.
 */
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "adaptalloc/cuda.h"
#include "adaptalloc/internal/util.h"
#include "runtime_internal.h"

/* ---------------------------------------------------------------- probe */

static const aa__rt_device_probe cuda_probe = {aa_cuda_device_identity, aa_cuda_mem_info};

static pthread_mutex_t ids_lock = PTHREAD_MUTEX_INITIALIZER;
static const aa__rt_device_probe *probe = &cuda_probe; /* under ids_lock */
static aa__rt_device_probe test_probe;                 /* under ids_lock */
/* 0 not asked, 1 known, -1 asked and refused (not asked again) */
static signed char ids_state[AA_MAX_DEVICES];
static aa_cuda_identity ids[AA_MAX_DEVICES];

void aa__rt_devices_test_probe(const aa__rt_device_probe *p) {
  pthread_mutex_lock(&ids_lock);
  if (p != NULL) {
    test_probe = *p;
    probe = &test_probe;
  } else {
    probe = &cuda_probe;
  }
  memset(ids_state, 0, sizeof ids_state);
  memset(ids, 0, sizeof ids);
  pthread_mutex_unlock(&ids_lock);
}

/* Device d's identity into *out, asked the first time and kept; false when
 * it cannot be had. */
static bool identity(int d, aa_cuda_identity *out) {
  bool ok;
  if (d < 0 || d >= AA_MAX_DEVICES)
    return false;
  pthread_mutex_lock(&ids_lock);
  if (ids_state[d] == 0)
    ids_state[d] = probe->identity(d, &ids[d]) == AA_OK && ids[d].uuid[0] != '\0' ? 1 : -1;
  ok = ids_state[d] == 1;
  if (ok)
    *out = ids[d];
  pthread_mutex_unlock(&ids_lock);
  return ok;
}

static int mem_info(int d, size_t *free_b, size_t *total_b) {
  int (*fn)(int, size_t *, size_t *);
  pthread_mutex_lock(&ids_lock);
  fn = probe->mem_info;
  pthread_mutex_unlock(&ids_lock);
  return fn(d, free_b, total_b);
}

/* ---------------------------------------------------------------- figures */

/* Whether a pool's memory is on its GPU: device memory ("cuda") or managed
 * memory (counted by what was last prefetched there). */
static bool on_gpu(const aa_pool_stats *st) {
  return st->device >= 0 && st->device < AA_MAX_DEVICES &&
         (strncmp(st->backend, "cuda", sizeof st->backend) == 0 ||
          strncmp(st->backend, "managed", sizeof st->backend) == 0);
}

size_t aa__rt_devices_read(const aa_pool_stats *pools, size_t n, aa__rt_device *out,
                           size_t cap) {
  uint64_t held[AA_MAX_DEVICES] = {0};
  bool used[AA_MAX_DEVICES] = {false};
  size_t k = 0;
  size_t i;

  for (i = 0; i < n; i++) {
    const aa_pool_stats *st = &pools[i];
    if (!on_gpu(st))
      continue;
    used[st->device] = true;
    held[st->device] += strncmp(st->backend, "managed", sizeof st->backend) == 0
                            ? st->managed_device_bytes
                            : st->bytes_reserved;
  }
  for (int d = 0; d < AA_MAX_DEVICES && k < cap; d++) {
    aa__rt_device *dv = &out[k];
    size_t f = 0, t = 0;
    if (!used[d])
      continue;
    memset(dv, 0, sizeof *dv);
    dv->device = d;
    dv->have_id = identity(d, &dv->id);
    dv->reserved = held[d];
    if (mem_info(d, &f, &t) == AA_OK && t > 0 && f <= t) {
      dv->have_mem = true;
      dv->total = t;
      dv->free = f;
      dv->used = t - f;
      dv->non_allocator = dv->used > dv->reserved ? dv->used - dv->reserved : 0;
    }
    k++;
  }
  return k;
}

const char *aa__rt_host_name(void) {
  static char name[256]; /* written once, under ids_lock */
  if (name[0] == '\0') {
    char tmp[sizeof name];
    if (gethostname(tmp, sizeof tmp) != 0)
      snprintf(tmp, sizeof tmp, "unknown");
    tmp[sizeof tmp - 1] = '\0';
    pthread_mutex_lock(&ids_lock);
    if (name[0] == '\0')
      memcpy(name, tmp, sizeof name);
    pthread_mutex_unlock(&ids_lock);
  }
  return name;
}

/* ------------------------------------------------------------------ JSON */

void aa__rt_devices_json(aa__buf *sb, const aa_pool_stats *pools, size_t n) {
  aa__rt_device dv[AA_MAX_DEVICES];
  size_t nd = aa__rt_devices_read(pools, n, dv, AA_MAX_DEVICES);
  aa__buf_printf(sb, ",\"host\":");
  aa__buf_json_cstr(sb, aa__rt_host_name());
  aa__buf_printf(sb, ",\"devices\":[");
  for (size_t i = 0; i < nd; i++) {
    const aa__rt_device *d = &dv[i];
    aa__buf_printf(sb, "%s{\"device\":%d,\"gpu_uuid\":", i ? "," : "", d->device);
    if (d->have_id) {
      aa__buf_json_cstr(sb, d->id.uuid);
      aa__buf_printf(sb, ",\"pci_bus_id\":");
      aa__buf_json_cstr(sb, d->id.pci_bus_id);
      aa__buf_printf(sb, ",\"name\":");
      aa__buf_json_cstr(sb, d->id.name);
    } else {
      aa__buf_printf(sb, "null,\"pci_bus_id\":null,\"name\":null");
    }
    aa__buf_printf(sb, ",\"reserved_bytes\":%llu", (unsigned long long)d->reserved);
    if (d->have_mem)
      aa__buf_printf(sb,
                     ",\"total_bytes\":%llu,\"free_bytes\":%llu,\"used_bytes\":%llu,"
                     "\"non_allocator_bytes\":%llu}",
                     (unsigned long long)d->total, (unsigned long long)d->free,
                     (unsigned long long)d->used, (unsigned long long)d->non_allocator);
    else
      aa__buf_printf(sb, ",\"total_bytes\":null,\"free_bytes\":null,\"used_bytes\":null,"
                         "\"non_allocator_bytes\":null}");
  }
  aa__buf_printf(sb, "]");
}

/* ------------------------------------------------------------ Prometheus */

void aa__rt_prom_label(char *out, size_t cap, const char *s) {
  size_t o = 0;
  for (; *s != '\0' && o + 3 < cap; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '\\' || c == '"' || c == '\n') {
      out[o++] = '\\';
      out[o++] = c == '\n' ? 'n' : (char)c;
    } else {
      out[o++] = c < 0x20 || c == 0x7F ? '_' : (char)c;
    }
  }
  out[o] = '\0';
}

void aa__rt_process_labels(const aa_runtime *rt, char *out, size_t cap) {
  char host[512];
  aa__rt_prom_label(host, sizeof host, aa__rt_host_name());
  if (rt->rank >= 0)
    snprintf(out, cap, "rank=\"%d\",host=\"%s\"", rt->rank, host);
  else
    snprintf(out, cap, "host=\"%s\"", host);
}

int aa__rt_pool_labels(aa_runtime *rt, const aa_pool_stats *st, aa_http_labels *out) {
  aa_cuda_identity id;
  memset(out, 0, sizeof *out);
  if (rt->rank >= 0) {
    snprintf(out->name[out->n], sizeof out->name[0], "rank");
    snprintf(out->value[out->n++], sizeof out->value[0], "%d", rt->rank);
  }
  snprintf(out->name[out->n], sizeof out->name[0], "host");
  snprintf(out->value[out->n++], sizeof out->value[0], "%.127s", aa__rt_host_name());
  if (on_gpu(st) && identity(st->device, &id)) {
    snprintf(out->name[out->n], sizeof out->name[0], "gpu_uuid");
    snprintf(out->value[out->n++], sizeof out->value[0], "%s", id.uuid);
    snprintf(out->name[out->n], sizeof out->name[0], "pci_bus_id");
    snprintf(out->value[out->n++], sizeof out->value[0], "%s", id.pci_bus_id);
  }
  return AA_OK;
}

static void device_family(aa__buf *sb, const char *name, const char *help,
                          const aa__rt_device *dv, size_t nd, const char *plabels,
                          int which) {
  bool any = false;
  for (size_t i = 0; i < nd; i++)
    any = any || (dv[i].have_mem || which == 3);
  if (!any)
    return;
  aa__buf_printf(sb, "# HELP %s %s\n# TYPE %s gauge\n", name, help, name);
  for (size_t i = 0; i < nd; i++) {
    const aa__rt_device *d = &dv[i];
    uint64_t v = which == 0   ? d->total
                 : which == 1 ? d->free
                 : which == 2 ? d->used
                 : which == 3 ? d->reserved
                              : d->non_allocator;
    if (which != 3 && !d->have_mem)
      continue;
    aa__buf_printf(sb, "%s{device=\"%d\"", name, d->device);
    if (d->have_id)
      aa__buf_printf(sb, ",gpu_uuid=\"%s\",pci_bus_id=\"%s\"", d->id.uuid, d->id.pci_bus_id);
    aa__buf_printf(sb, ",%s} %llu\n", plabels, (unsigned long long)v);
  }
}

void aa__rt_devices_metrics(aa__buf *sb, const aa_runtime *rt, const aa_pool_stats *pools,
                            size_t n) {
  aa__rt_device dv[AA_MAX_DEVICES];
  size_t nd = aa__rt_devices_read(pools, n, dv, AA_MAX_DEVICES);
  char plabels[640];
  bool any_id = false;

  if (nd == 0)
    return; /* no GPU pool: no device series at all */
  aa__rt_process_labels(rt, plabels, sizeof plabels);
  for (size_t i = 0; i < nd; i++)
    any_id = any_id || dv[i].have_id;
  if (any_id) {
    aa__buf_printf(sb, "# HELP adaptalloc_device_info A GPU this process's pools are on: its "
                       "CUDA ordinal here (device), UUID, PCI bus id and name.\n"
                       "# TYPE adaptalloc_device_info gauge\n");
    for (size_t i = 0; i < nd; i++) {
      char name[sizeof dv[i].id.name * 2 + 4];
      if (!dv[i].have_id)
        continue;
      aa__rt_prom_label(name, sizeof name, dv[i].id.name);
      aa__buf_printf(sb,
                     "adaptalloc_device_info{device=\"%d\",gpu_uuid=\"%s\",pci_bus_id=\"%s\","
                     "name=\"%s\",%s} 1\n",
                     dv[i].device, dv[i].id.uuid, dv[i].id.pci_bus_id, name, plabels);
    }
  }
  device_family(sb, "adaptalloc_device_total_bytes", "The GPU's memory (cudaMemGetInfo).", dv,
                nd, plabels, 0);
  device_family(sb, "adaptalloc_device_free_bytes",
                "The GPU's free memory now, for every process (cudaMemGetInfo).", dv, nd,
                plabels, 1);
  device_family(sb, "adaptalloc_device_used_bytes",
                "The GPU's memory in use now, every process's (total - free).", dv, nd, plabels,
                2);
  device_family(sb, "adaptalloc_device_reserved_bytes",
                "Bytes this process's pools hold on the GPU (device pools' reserved, managed "
                "pools' pages last prefetched there).",
                dv, nd, plabels, 3);
  device_family(sb, "adaptalloc_device_nonallocator_bytes",
                "The GPU's used memory that this process's pools do not hold (used - "
                "reserved): CUDA contexts, libraries' workspaces, other processes.",
                dv, nd, plabels, 4);
}
