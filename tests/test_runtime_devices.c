/*
 * test_runtime_devices.c — the GPUs the pools are on, as /stats and
 * /metrics show them (runtime_devices.c): with a fake GPU (the test probe,
 * no CUDA needed) each device once with its UUID, PCI bus id, total, free,
 * used, the pools' reserved bytes (device pools' reserved, managed pools'
 * pages on the device) and the rest as non-allocator memory; a device whose
 * memory cannot be read says null and writes no memory series; the pool
 * series of a GPU pool carry gpu_uuid and pci_bus_id, every series the rank
 * and host. Then the real runtime on the host backend (CI: no GPU):
 * "devices": [] and no adaptalloc_device_* series, the host in /stats and
 * adaptalloc_info, rank and host on the pool series and the process's own.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cmocka.h>

#include "adaptalloc/internal/util.h"
#include "runtime_test.h"
#include "loopback_get.h"

#define GiB ((uint64_t)1 << 30)

static int fake_identity(int d, aa_cuda_identity *out) {
  memset(out, 0, sizeof *out);
  out->version = AA_CUDA_IDENTITY_VERSION;
  out->size = sizeof *out;
  out->device = d;
  if (d > 1)
    return AA_ENODEV;
  snprintf(out->uuid, sizeof out->uuid, "GPU-0000000%c-1111-2222-3333-444444444444", (char)('0' + d));
  snprintf(out->pci_bus_id, sizeof out->pci_bus_id, "00000000:%02X:00.0", 0x3B + d);
  snprintf(out->name, sizeof out->name, "Fake \"H100\"");
  out->total_bytes = 80 * GiB;
  return AA_OK;
}

static int identity_calls;
static int counting_identity(int d, aa_cuda_identity *out) {
  identity_calls++;
  return fake_identity(d, out);
}

/* device 0: 80 GiB, 70 free; device 1: its memory cannot be read */
static int fake_mem_info(int d, size_t *free_b, size_t *total_b) {
  *free_b = 0;
  *total_b = 0;
  if (d != 0)
    return AA_EBACKEND;
  *free_b = (size_t)(70 * GiB);
  *total_b = (size_t)(80 * GiB);
  return AA_OK;
}

static const aa__rt_device_probe fake = {counting_identity, fake_mem_info};

static void init_pool(aa_pool_stats *st, const char *name, const char *backend, int device,
                      uint64_t reserved) {
  memset(st, 0, sizeof *st);
  st->version = AA_STATS_VERSION;
  st->size = sizeof *st;
  snprintf(st->name, sizeof st->name, "%s", name);
  snprintf(st->backend, sizeof st->backend, "%s", backend);
  st->device = device;
  st->bytes_reserved = reserved;
}

/* device0 3 GiB + its region 1 GiB on device 0; a managed pool on device 1
 * with 0.5 GiB of its 2 GiB there; pinned and host pools on no GPU. */
static aa_pool_stats *five_pools(void) {
  aa_pool_stats *p = calloc(5, sizeof *p);
  assert_non_null(p);
  init_pool(&p[0], "device0", "cuda", 0, 3 * GiB);
  init_pool(&p[1], "device0:kv", "cuda", 0, 1 * GiB);
  init_pool(&p[2], "managed1", "managed", 1, 2 * GiB);
  p[2].managed_device_bytes = GiB / 2;
  init_pool(&p[3], "pinned", "pinned", -1, 5 * GiB);
  init_pool(&p[4], "host", "host", -1, 7 * GiB);
  return p;
}

static void test_runtime_devices_figures(void **state) {
  aa__rt_device dv[4];
  aa_pool_stats *p = five_pools();
  size_t n;
  (void)state;
  aa__rt_devices_test_probe(&fake);
  identity_calls = 0;
  n = aa__rt_devices_read(p, 5, dv, 4);
  assert_int_equal(n, 2);
  assert_int_equal(dv[0].device, 0);
  assert_true(dv[0].have_id && dv[0].have_mem);
  assert_string_equal(dv[0].id.uuid, "GPU-00000000-1111-2222-3333-444444444444");
  assert_string_equal(dv[0].id.pci_bus_id, "00000000:3B:00.0");
  assert_true(dv[0].total == 80 * GiB && dv[0].free == 70 * GiB && dv[0].used == 10 * GiB);
  assert_true(dv[0].reserved == 4 * GiB);
  assert_true(dv[0].non_allocator == 6 * GiB);
  assert_int_equal(dv[1].device, 1);
  assert_true(dv[1].have_id && !dv[1].have_mem);
  assert_true(dv[1].reserved == GiB / 2);
  /* identities are asked once per device and kept */
  assert_int_equal(identity_calls, 2);
  n = aa__rt_devices_read(p, 5, dv, 1);
  assert_int_equal(n, 1);
  assert_int_equal(identity_calls, 2);
  /* more reserved than the driver counts used: non-allocator is 0, never
   * a wrapped-around figure */
  p[0].bytes_reserved = 20 * GiB;
  assert_int_equal(aa__rt_devices_read(p, 5, dv, 4), 2);
  assert_true(dv[0].non_allocator == 0);
  /* only pools on a GPU count: host and pinned alone ask nothing */
  identity_calls = 0;
  aa__rt_devices_test_probe(&fake);
  assert_int_equal(aa__rt_devices_read(&p[3], 2, dv, 4), 0);
  assert_int_equal(identity_calls, 0);
  aa__rt_devices_test_probe(NULL);
  free(p);
}

static void test_runtime_devices_json_and_metrics(void **state) {
  static aa_runtime rt; /* only its rank is read */
  aa_pool_stats *p = five_pools();
  aa_http_labels l;
  aa__buf b;
  char want[512];
  (void)state;
  aa__rt_devices_test_probe(&fake);
  rt.rank = 5;

  aa__buf_init(&b);
  aa__rt_devices_json(&b, p, 5);
  assert_false(b.failed);
  snprintf(want, sizeof want, ",\"host\":\"%s\",\"devices\":[", aa__rt_host_name());
  assert_non_null(strstr(b.data, want));
  assert_non_null(strstr(
      b.data, "{\"device\":0,\"gpu_uuid\":\"GPU-00000000-1111-2222-3333-444444444444\","
              "\"pci_bus_id\":\"00000000:3B:00.0\",\"name\":\"Fake \\\"H100\\\"\","
              "\"reserved_bytes\":4294967296,\"total_bytes\":85899345920,"
              "\"free_bytes\":75161927680,\"used_bytes\":10737418240,"
              "\"non_allocator_bytes\":6442450944}"));
  assert_non_null(strstr(b.data, "\"device\":1,"));
  assert_non_null(strstr(b.data, "\"reserved_bytes\":536870912,\"total_bytes\":null,"
                                 "\"free_bytes\":null,\"used_bytes\":null,"
                                 "\"non_allocator_bytes\":null}"));
  aa__buf_free(&b);

  aa__buf_init(&b);
  aa__rt_devices_metrics(&b, &rt, p, 5);
  assert_false(b.failed);
  snprintf(want, sizeof want,
           "adaptalloc_device_nonallocator_bytes{device=\"0\","
           "gpu_uuid=\"GPU-00000000-1111-2222-3333-444444444444\","
           "pci_bus_id=\"00000000:3B:00.0\",rank=\"5\",host=\"%s\"} 6442450944\n",
           aa__rt_host_name());
  assert_non_null(strstr(b.data, want));
  assert_non_null(strstr(b.data, "adaptalloc_device_info{device=\"1\",gpu_uuid=\"GPU-00000001-"));
  assert_non_null(strstr(b.data, "name=\"Fake \\\"H100\\\"\""));
  assert_non_null(strstr(b.data, "adaptalloc_device_total_bytes{device=\"0\""));
  assert_non_null(strstr(b.data, "adaptalloc_device_free_bytes{device=\"0\""));
  assert_non_null(strstr(b.data, "adaptalloc_device_used_bytes{device=\"0\""));
  /* device 1's memory is unknown: its reserved bytes only */
  assert_null(strstr(b.data, "adaptalloc_device_total_bytes{device=\"1\""));
  assert_non_null(strstr(b.data, "adaptalloc_device_reserved_bytes{device=\"1\""));
  aa__buf_free(&b);

  /* the pool labels: rank and host everywhere, the card on GPU pools */
  assert_int_equal(aa__rt_pool_labels(&rt, &p[0], &l), AA_OK);
  assert_int_equal(l.n, 4);
  assert_string_equal(l.name[0], "rank");
  assert_string_equal(l.value[0], "5");
  assert_string_equal(l.name[1], "host");
  assert_string_equal(l.name[2], "gpu_uuid");
  assert_string_equal(l.value[2], "GPU-00000000-1111-2222-3333-444444444444");
  assert_string_equal(l.name[3], "pci_bus_id");
  assert_int_equal(aa__rt_pool_labels(&rt, &p[3], &l), AA_OK);
  assert_int_equal(l.n, 2);
  rt.rank = -1; /* RANK unset: no rank label */
  assert_int_equal(aa__rt_pool_labels(&rt, &p[4], &l), AA_OK);
  assert_int_equal(l.n, 1);
  assert_string_equal(l.name[0], "host");
  aa__rt_devices_test_probe(NULL);
  free(p);
}

/* GET path from the runtime's server; the whole answer into buf. */
static void http_get(const char *path, char *buf, size_t cap) {
  loopback_get(runtime_http_port(), path, buf, cap);
}

/* The real runtime on the host backend: no device pool, so no device
 * series, and every series says which process it is. */
static void test_runtime_devices_host_only(void **state) {
  static char resp[1 << 20];
  char want[512];
  (void)state;
#if !AA_TEST_WITH_HTTP
  skip();
#endif
  setenv("RANK", "4", 1);
  setenv("LOCAL_RANK", "1", 1);
  setenv("ADAPTALLOC_HTTP", "127.0.0.1:0", 1);
  setenv("ADAPTALLOC_DB", "off", 1);
  setenv("ADAPTALLOC_QUIET", "1", 1);
  assert_non_null(aa_runtime_pool(AA_BACKEND_HOST, 0));
  http_get("/stats", resp, sizeof resp);
  snprintf(want, sizeof want, "\"host\":\"%s\",\"devices\":[],", aa__rt_host_name());
  assert_non_null(strstr(resp, want));
  http_get("/metrics", resp, sizeof resp);
  assert_null(strstr(resp, "adaptalloc_device_"));
  snprintf(want, sizeof want,
           "adaptalloc_reserved_bytes{pool=\"host\",backend=\"host\",device=\"cpu\","
           "rank=\"4\",host=\"%s\"} ",
           aa__rt_host_name());
  assert_non_null(strstr(resp, want));
  snprintf(want, sizeof want, "rank=\"4\",local_rank=\"1\",host=\"%s\",version=",
           aa__rt_host_name());
  assert_non_null(strstr(resp, want));
  snprintf(want, sizeof want, "\nadaptalloc_policy_version{rank=\"4\",host=\"%s\"} ",
           aa__rt_host_name());
  assert_non_null(strstr(resp, want));
  aa_runtime_shutdown();
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_runtime_devices_figures),
      cmocka_unit_test(test_runtime_devices_json_and_metrics),
      cmocka_unit_test(test_runtime_devices_host_only),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
