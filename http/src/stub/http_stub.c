/*
 * http_stub.c — the HTTP module when configured out (-DAA_WITH_HTTP=OFF):
 * every entry point of adaptalloc/http.h answers AA_ENOTSUP (or nothing), so
 * callers need no #ifdefs.
 */
#include <stdio.h>
#include <string.h>

#include "adaptalloc/http.h"

static void stub_err(char *err, size_t errcap) {
  if (err != NULL && errcap > 0)
    snprintf(err, errcap, "ADAPTALLOC_HTTP: built without the HTTP server "
                          "(AA_WITH_HTTP=OFF)");
}

int aa_http_parse_address(const char *spec, int local_rank, aa_http_addr *out,
                          char *err, size_t errcap) {
  (void)spec;
  (void)local_rank;
  if (out != NULL)
    memset(out, 0, sizeof *out);
  stub_err(err, errcap);
  return AA_ENOTSUP;
}

int aa_http_local_rank_from_env(int *rank) {
  if (rank != NULL)
    *rank = -1;
  return AA_ENOTSUP;
}

void aa_http_config_init(aa_http_config *cfg) {
  if (cfg == NULL)
    return;
  memset(cfg, 0, sizeof *cfg);
  cfg->version = AA_HTTP_CONFIG_VERSION;
  cfg->local_rank = -1;
}

int aa_http_new(const aa_http_config *cfg, const aa_http_provider *prov,
                aa_http **out, char *err, size_t errcap) {
  (void)cfg;
  (void)prov;
  if (out != NULL)
    *out = NULL;
  stub_err(err, errcap);
  return AA_ENOTSUP;
}

void aa_http_destroy(aa_http *srv) { (void)srv; }

int aa_http_port(const aa_http *srv) {
  (void)srv;
  return 0;
}

const char *aa_http_bound_address(const aa_http *srv) {
  (void)srv;
  return "";
}

void aa_http_get_counters(const aa_http *srv, aa_http_counters *out) {
  (void)srv;
  if (out != NULL)
    memset(out, 0, sizeof *out);
}

int aa_http_render_metrics(const aa_pool_stats *pools, size_t n, char **out,
                           size_t *len) {
  (void)pools;
  (void)n;
  if (out != NULL)
    *out = NULL;
  if (len != NULL)
    *len = 0;
  return AA_ENOTSUP;
}

int aa_http_holders_json(aa_pool *pool, unsigned top, char **out, size_t *len) {
  (void)pool;
  (void)top;
  if (out != NULL)
    *out = NULL;
  if (len != NULL)
    *len = 0;
  return AA_ENOTSUP;
}

int aa_http_holders_json_frames(aa_pool *pool, unsigned top, aa_http_frames_fn frames_fn,
                                void *user, char **out, size_t *len) {
  (void)frames_fn;
  (void)user;
  return aa_http_holders_json(pool, top, out, len);
}

int aa_http_segments_json(aa_pool *pool, char **out, size_t *len) {
  (void)pool;
  if (out != NULL)
    *out = NULL;
  if (len != NULL)
    *len = 0;
  return AA_ENOTSUP;
}
