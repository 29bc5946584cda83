/*
 * adaptalloc/http.h — the embedded HTTP service: /stats, /metrics, /policy,
 * /history, /runs, /healthz and the dashboard at /.
 *
 * The server knows nothing of pools, policies or the store. Whoever creates
 * it (the runtime, a test, a tool) hands it an aa_http_provider: a table of
 * callbacks plus a user pointer. The server parses and checks requests,
 * calls the provider, and turns its answers into HTTP responses.
 *
 * Threads: the server has one thread, which accepts, checks every request
 * head and runs libmicrohttpd (external mode, epoll; never select). Every
 * provider callback is called from that one thread, one request at a time; callbacks must still be
 * safe against the creator's other threads (the allocator keeps running).
 * Callbacks should return quickly: they hold up other requests, never the
 * allocator.
 *
 * Built with -DAA_WITH_HTTP=OFF, every function here is a stub: the ones that
 * return int return AA_ENOTSUP, the others do nothing or return 0/"".
 *
 * Endpoints, status codes and metric names: docs/http.md.
 */
#ifndef ADAPTALLOC_HTTP_H
#define ADAPTALLOC_HTTP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "adaptalloc/common.h"
#include "adaptalloc/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------ addresses */

/* A parsed listen address (the value of ADAPTALLOC_HTTP). Accepted forms:
 *   off                  the server is disabled (off = true)
 *   127.0.0.1:9100       IPv4 literal and port
 *   [::1]:9100           IPv6 literal in brackets and port
 *   localhost:9100       same as 127.0.0.1:9100
 *   :9100  or  9100      port only: loopback 127.0.0.1 (never all interfaces)
 *   0.0.0.0:9100, [::]:9100   all interfaces (needs a token, see aa_http_new)
 *   <any of the above>+rank   port plus the local rank: 127.0.0.1:9100+rank
 *                        listens on 9100 + LOCAL_RANK (as torchrun sets it);
 *                        port 0 stays 0 (any free port).
 * Port 0 asks the kernel for a free port. Host names other than localhost
 * are refused (no DNS lookups at start-up). */
typedef struct aa_http_addr {
  bool off;       /* "off": nothing else is set */
  bool ipv6;      /* host is an IPv6 literal */
  bool loopback;  /* 127.0.0.0/8, ::1 or ::ffff:127.x.y.z */
  bool plus_rank; /* the spec ended in "+rank" (port already includes it) */
  uint16_t port;  /* final port, rank added; 0 = any free port */
  char host[48];  /* numeric host without brackets: "127.0.0.1", "::1" */
} aa_http_addr;

/* Parses `spec` (see above) into *out. `local_rank` is the rank added for
 * "+rank" (the caller reads LOCAL_RANK; pass -1 when it is unset, which
 * counts as rank 0). Pure: reads no environment, opens no socket.
 * Returns AA_OK, or AA_EINVAL with a message in err (may be NULL) naming what
 * is wrong; *out is zeroed on failure. */
AA_EXTERN int aa_http_parse_address(const char *spec, int local_rank,
                                    aa_http_addr *out, char *err,
                                    size_t errcap);

/* Reads LOCAL_RANK from the environment into *rank: its value, or -1 when
 * unset or empty. AA_EINVAL (and *rank -1) when it is set but not an integer
 * from 0 to 65535. */
AA_EXTERN int aa_http_local_rank_from_env(int *rank);

/* ------------------------------------------------------------ provider */

/* Query of GET /history; -1 means "not given". */
typedef struct aa_http_history_query {
  int64_t since; /* entries with time >= since (Unix time, milliseconds) */
  int64_t limit; /* at most this many entries; the server always sets it
                    (default 100, 1 .. 10000) */
  int64_t run;   /* store run id; -1 = the current run */
  int64_t step;  /* > 0: per pool and step-ms slice of time only the
                    snapshot with the most bytes reserved (long ranges);
                    -1 = every snapshot */
  bool policies; /* add each policy change's policy document ("policy") */
} aa_http_history_query;

/* Policy-change requests (PUT and PATCH /policy). */
typedef struct aa_http_policy_change {
  const char *body; /* the request body (not NUL-terminated) */
  size_t len;
  bool has_if_match;  /* an If-Match with one version was sent */
  uint64_t if_match;  /* ... that version: refuse with AA_ESTALE if the
                             version in force differs */
  const char *source; /* "http" (for the audit log) */
  const char *client; /* peer address, "127.0.0.1" (for the audit log) */
  bool *unchanged;    /* may be NULL; else the provider sets *unchanged true
                         when the result equals the policy in force, so
                         nothing changed (and *new_version is that policy's
                         version) */
} aa_http_policy_change;

/* Labels a provider adds to a pool's series in /metrics (pool_labels): n
 * name/value pairs. A name must be a Prometheus label name ([a-zA-Z_]
 * [a-zA-Z0-9_]*, not starting with "__") other than the server's own (pool,
 * backend, device, region, size_le, le); the server skips any other, and
 * an empty value (Prometheus reads it as no label). Values are escaped by
 * the server. */
#define AA_HTTP_MAX_LABELS 8
typedef struct aa_http_labels {
  size_t n;
  char name[AA_HTTP_MAX_LABELS][32];
  char value[AA_HTTP_MAX_LABELS][128];
} aa_http_labels;

/* The callbacks. Every pointer may be NULL: the endpoint then answers 503
 * with {"error": "... not available"}. All text results are malloc'd by the
 * provider and freed by the server with free(); on any error the provider
 * leaves *out NULL. Error returns map to HTTP status codes as follows:
 *   AA_EPARSE, AA_EINVAL, AA_ERANGE -> 400     AA_ENOENT  -> 404
 *   AA_ESTALE -> 412                           AA_EPERM   -> 403
 *   AA_ECONFLICT -> 409 (a setting that cannot change while its pool or
 *   service lives; the message names it)
 *   AA_ENOTSUP, AA_ECLOSED -> 503 (e.g. the store is off)
 *   AA_EBUSY, AA_EAGAIN -> 503 with Retry-After: 1;  anything else -> 500. */
#define AA_HTTP_PROVIDER_VERSION 1
typedef struct aa_http_provider {
  uint32_t version; /* AA_HTTP_PROVIDER_VERSION */
  void *user;       /* passed to every callback */

  /* GET /stats[?pool=NAME]: a JSON object (docs/stats.md). pool is NULL for
   * all pools; an unknown pool is AA_ENOENT. The dashboard reads
   * "pools": [aa_pool_stats_json objects ...] and "policy_version". */
  int (*stats_json)(void *user, const char *pool, char **out, size_t *len);

  /* GET /metrics: snapshots of every pool. *out is a malloc'd array of *n
   * snapshots (aa_pool_stats_get), freed by the server with free(). */
  int (*pool_stats)(void *user, aa_pool_stats **out, size_t *n);

  /* GET /metrics, optional: extra exposition text appended verbatim (the
   * runtime's own gauges: store queue drops, loop decisions...). Must be
   * valid Prometheus text with its own HELP/TYPE lines. When set it writes
   * adaptalloc_build_info{version,model,rank} as well (the server writes
   * it, with model and rank empty, only without this callback). */
  int (*metrics_extra)(void *user, char **out, size_t *len);

  /* GET /policy: the policy in force as JSON and its version (the ETag). */
  int (*policy_get)(void *user, char **json, size_t *len, uint64_t *version);

  /* PUT /policy: replace the whole policy. Validate whole; on any error
   * change nothing and write a message (with the JSON path and the rule,
   * "pools.device.classes[3]: 1000 is not a multiple of 512") into err.
   * On success *new_version is the version now in force: the one before
   * when the document equals the policy in force (then nothing changes and
   * *change->unchanged is set). */
  int (*policy_put)(void *user, const aa_http_policy_change *change,
                    uint64_t *new_version, char *err, size_t errcap);

  /* PATCH /policy: apply body as an RFC 7386 JSON merge patch to the policy
   * in force, then as policy_put. */
  int (*policy_patch)(void *user, const aa_http_policy_change *change,
                      uint64_t *new_version, char *err, size_t errcap);

  /* GET /history: stored snapshots and policy changes as one JSON object:
   *   {"run": N, "snapshots": [{"time_ms":..,"pool":..,"bytes_in_use":..,
   *    "bytes_reserved":..}, ...],
   *    "policy_changes": [{"time_ms":..,"source":"http","old_version":..,
   *    "new_version":..,"reason":".."}, ...]}
   * (the dashboard's change log reads "policy_changes"). */
  int (*history_json)(void *user, const aa_http_history_query *q, char **out,
                      size_t *len);

  /* GET /runs: {"runs": [...]} from the store. */
  int (*runs_json)(void *user, char **out, size_t *len);

  /* GET /segments?pool=NAME, optional: the pool's large-path segments and
   * their used and free pieces (docs/http.md); an unknown pool is
   * AA_ENOENT. */
  int (*segments_json)(void *user, const char *pool, char **out, size_t *len);

  /* GET /holders?pool=NAME[&top=N], optional: who holds the pool's memory
   * now, the top `top` (1 to AA_HTTP_HOLDERS_MAX) live sizes and largest
   * live blocks (aa_http_holders_json; docs/http.md); an unknown pool is
   * AA_ENOENT. */
  int (*holders_json)(void *user, const char *pool, unsigned top, char **out, size_t *len);

  /* GET /oom[?limit=N], optional: {"count":N,"last":{record}|null} for
   * this process, plus with limit > 0 "stored": the store's newest `limit`
   * records of the run (docs/http.md). limit 0: not asked. */
  int (*oom_json)(void *user, int64_t limit, char **out, size_t *len);

  /* GET /metrics, optional: labels added to every series of the pool whose
   * snapshot is *st (one of pool_stats's), after pool, backend, device and
   * region: e.g. the process's rank and host and a GPU's UUID, so that a
   * series names its process and card whatever the scrape configuration
   * adds. *out is zeroed before the call; anything but AA_OK adds none. */
  int (*pool_labels)(void *user, const aa_pool_stats *st, aa_http_labels *out);
} aa_http_provider;

/* ------------------------------------------------------------ server */

typedef struct aa_http aa_http;

#define AA_HTTP_CONFIG_VERSION 1
typedef struct aa_http_config {
  uint32_t version;            /* AA_HTTP_CONFIG_VERSION */
  const char *address;         /* ADAPTALLOC_HTTP form, see above; NULL = the
                              default 127.0.0.1:9100 */
  int local_rank;              /* for "+rank"; -1 = unset (rank 0) */
  const char *token;           /* ADAPTALLOC_TOKEN; NULL or "" = none. Copied. */
  unsigned max_connections;    /* default 64 */
  unsigned per_ip_connections; /* default 32 */
  unsigned timeout_s;          /* idle connection timeout, default 10 */
  size_t max_body;             /* request body limit, default 64 KiB -> 413 */
  size_t max_header;           /* request line + headers, default 16 KiB */
  unsigned stats_cache_ms;     /* /stats and /metrics answers are reused for
                                  this long (default 0 = never); a successful
                                  policy change clears the cache */
} aa_http_config;

/* Fills in the defaults above. */
AA_EXTERN void aa_http_config_init(aa_http_config *cfg);

/* Starts a server. cfg may be NULL (defaults); prov is copied (the user
 * pointer must stay valid until aa_http_destroy). Fails, with a message in
 * err (may be NULL) that names ADAPTALLOC_HTTP and the address, when:
 *   the address does not parse                       AA_EINVAL
 *   it is "off"                                      AA_ENOENT
 *   it is not loopback and no token is set           AA_EPERM
 *   the address is in use (never picks another port) AA_EBUSY
 *   any other socket or libmicrohttpd failure        AA_EIO
 *   built without HTTP                               AA_ENOTSUP
 * *out is owned by the caller: aa_http_destroy. On failure *out is NULL. */
AA_EXTERN int aa_http_new(const aa_http_config *cfg,
                          const aa_http_provider *prov, aa_http **out,
                          char *err, size_t errcap);

/* Stops the server: closes the listening socket, waits for the polling
 * thread, frees everything. No callback runs after it returns. NULL is a
 * no-op. */
AA_EXTERN void aa_http_destroy(aa_http *srv);

/* The port actually bound (the kernel's pick for port 0). */
AA_EXTERN int aa_http_port(const aa_http *srv);

/* "127.0.0.1:9100" / "[::1]:9100" as bound, with the actual port. The string
 * lives as long as the server. */
AA_EXTERN const char *aa_http_bound_address(const aa_http *srv);

/* Counters of the server itself (also in /metrics). */
typedef struct aa_http_counters {
  uint64_t requests; /* answered by the handler */
  uint64_t status_2xx;
  uint64_t status_3xx;
  uint64_t status_4xx;
  uint64_t status_5xx;
  uint64_t policy_changes; /* PUT/PATCH that succeeded */
} aa_http_counters;
AA_EXTERN void aa_http_get_counters(const aa_http *srv, aa_http_counters *out);

/* ------------------------------------------------------------ Prometheus */

/* The large-path segments of pool as JSON (GET /segments):
 *   {"pool":"..","segment_count":N,"bytes":B,"used_bytes":U,"truncated":false,
 *    "segments":[{"address":"0x..","size":S,"used":U,"expandable":false,
 *                 "pieces":[[bytes,1 in use|0 free],...]},...]}
 * in address order; neighbouring free pieces merged; at most 4096 segments
 * and 65536 pieces listed (then "truncated": true; the totals count all).
 * *out is malloc'd (free()). AA_EINVAL, AA_ENOMEM. */
AA_EXTERN int aa_http_segments_json(aa_pool *pool, char **out, size_t *len);

/* Who holds pool's memory now, as JSON (GET /holders), from one
 * aa_pool_walk (every class and the large path, each under its lock):
 *   {"pool":"..","top":N,"live_blocks":B,"live_bytes":H,"requested_bytes":R,
 *    "walk_us":T,"top_sizes":[{"size":requested,"blocks":n,"bytes":held},...],
 *    "distinct_sizes":D,"other":{"blocks":n,"bytes":held},
 *    "largest":[{"offset":O,"size":S,"requested":R,"kind":"slab|large|planned",
 *                "stitched":false,"frames":null,"frames_evicted":false},...]}
 * sizes: the `top` requested sizes holding the most block bytes (at most
 * 32768 distinct sizes are told apart; the blocks of any further size are
 * "other"); largest: the `top` largest live blocks, largest first, placed by
 * their offset from the lowest segment of the walk (no address is served).
 * frames is null here: aa_http_holders_json_frames names them. top is 1
 * to AA_HTTP_HOLDERS_MAX. *out is malloc'd (free()). AA_EINVAL, AA_ENOMEM. */
#define AA_HTTP_HOLDERS_MAX 100
AA_EXTERN int aa_http_holders_json(aa_pool *pool, unsigned top, char **out, size_t *len);

/* The call stack of the live block at ptr of pool, for /holders: AA_OK with
 * *text malloc'd (the frames, one a line; the caller frees it) and *len;
 * AA_ENOENT when no stack is known for it; AA_ELIMIT when it was traced
 * with a stack that is no longer kept (evicted). Called after the walk, for
 * the `top` largest blocks only. */
typedef int (*aa_http_frames_fn)(void *user, aa_pool *pool, const void *ptr, char **text,
                                 size_t *len);
/* aa_http_holders_json, with each of the largest blocks' "frames" from
 * frames_fn (NULL: none): a list of strings, one a line of the text, or
 * null; and "frames_evicted": true where frames_fn said AA_ELIMIT (else
 * false). The runtime's /holders (docs/http.md "GET /holders"). */
AA_EXTERN int aa_http_holders_json_frames(aa_pool *pool, unsigned top, aa_http_frames_fn frames_fn,
                                          void *user, char **out, size_t *len);

/* Renders snapshots of n pools as Prometheus text exposition (format 0.0.4)
 * into a malloc'd NUL-terminated string (*out, freed with free(); *len its
 * length). Per-class families are summed into fixed block-size buckets
 * (label le, cumulative, inclusive: le="1023" is below 1 KiB). This form keeps no state: the server's /metrics also
 * keeps retired classes' counters in their bucket. Metric names:
 * docs/http.md. */
AA_EXTERN int aa_http_render_metrics(const aa_pool_stats *pools, size_t n,
                                     char **out, size_t *len);

#ifdef __cplusplus
}
#endif
#endif /* ADAPTALLOC_HTTP_H */
