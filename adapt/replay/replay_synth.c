/*
 * replay_synth.c — recorded histograms: reading them (JSON or CSV) and
 * synthesising a deterministic request stream from one.
 *
 * Entry points: aa_replay_hist_parse / aa_replay_hist_load_file,
 * aa_replay_hist_clear, aa_replay_synth_config_init, aa_replay_synth.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <cJSON.h>

#include "adaptalloc/internal/json_text.h"
#include "replay_internal.h"

#define BATCH 1024
#define HIST_MAX_FILE (64u << 20)
/* A message quotes a number whole up to this many bytes (messages fit
 * AA_REPLAY_ERR_CAP); a longer one by its first and last digits and its
 * length (docs/security.md). */
#define HIST_QUOTE_MAX 100

void aa_replay_hist_clear(aa_replay_hist *h) {
  if (h == NULL)
    return;
  free(h->exact);
  memset(h, 0, sizeof *h);
}

static int add_exact(aa_replay_hist *h, size_t *cap, uint64_t size,
                     uint64_t count) {
  size_t i;

  for (i = 0; i < h->nexact; i++) {
    if (h->exact[i].size == size) {
      h->exact[i].count += count;
      return AA_OK;
    }
  }
  if (h->nexact == *cap) {
    size_t ncap = *cap == 0 ? 16 : *cap * 2;
    aa_size_count *nv = realloc(h->exact, ncap * sizeof *nv);
    if (nv == NULL)
      return AA_ENOMEM;
    h->exact = nv;
    *cap = ncap;
  }
  h->exact[h->nexact].size = size;
  h->exact[h->nexact].count = count;
  h->nexact++;
  return AA_OK;
}

/* A JSON number that is a non-negative integer below 2^53. */
static bool json_u64(const cJSON *v, uint64_t *out) {
  double d;

  if (!cJSON_IsNumber(v))
    return false;
  d = v->valuedouble;
  if (!(d >= 0.0) || d > 9007199254740992.0 || d != (double)(uint64_t)d)
    return false;
  *out = (uint64_t)d;
  return true;
}

/* A number for a message, as the file wrote it (HIST_QUOTE_MAX). */
static const char *quote(const cJSON *v, char *dst, size_t cap) {
  const char *t = aa__json_number_text(v);
  aa__buf b;
  if (t == NULL) {
    snprintf(dst, cap, "%.17g", v != NULL ? v->valuedouble : 0.0);
    return dst;
  }
  aa__buf_init(&b);
  aa__buf_number(&b, t, strlen(t), HIST_QUOTE_MAX);
  snprintf(dst, cap, "%s", b.data != NULL ? b.data : "?");
  aa__buf_free(&b);
  return dst;
}

static int json_pool(const cJSON *o, const char *where, aa_replay_hist *h,
                     size_t *cap, bool *found, char *err, size_t errcap) {
  const cJSON *hist = cJSON_GetObjectItemCaseSensitive(o, "hist");
  const cJSON *sizes = cJSON_GetObjectItemCaseSensitive(o, "sizes");
  const cJSON *it;
  int i;

  if (sizes == NULL)
    sizes = cJSON_GetObjectItemCaseSensitive(o, "hh");
  if (hist != NULL) {
    if (!cJSON_IsArray(hist) || cJSON_GetArraySize(hist) > AA_HIST_BUCKETS) {
      aa__errf(err, errcap, "%shist: expected an array of at most %d "
                            "counts",
               where, AA_HIST_BUCKETS);
      return AA_EPARSE;
    }
    i = 0;
    cJSON_ArrayForEach(it, hist) {
      uint64_t c;
      if (!json_u64(it, &c)) {
        char num[HIST_QUOTE_MAX + 64];
        aa__errf(err, errcap, "%shist[%d]: expected a non-negative "
                              "integer count below 2^53, got %s",
                 where, i, quote(it, num, sizeof num));
        return AA_EPARSE;
      }
      h->hist[i++] += c;
    }
    *found = true;
  }
  if (sizes != NULL) {
    if (!cJSON_IsArray(sizes)) {
      aa__errf(err, errcap, "%s%s: expected an array of {\"size\", "
                            "\"count\"} objects",
               where, sizes->string);
      return AA_EPARSE;
    }
    i = 0;
    cJSON_ArrayForEach(it, sizes) {
      uint64_t sz = 0, c = 0;
      const cJSON *bad = NULL; /* the member that is not one, if any */
      bool ok = cJSON_IsObject(it);
      if (ok) {
        bad = cJSON_GetObjectItemCaseSensitive(it, "size");
        ok = json_u64(bad, &sz);
        if (ok) {
          bad = cJSON_GetObjectItemCaseSensitive(it, "count");
          ok = json_u64(bad, &c);
        }
      }
      if (!ok) {
        char num[HIST_QUOTE_MAX + 64];
        aa__errf(err, errcap, "%s%s[%d]: expected {\"size\": N, "
                              "\"count\": N} with non-negative integers "
                              "below 2^53%s%s",
                 where, sizes->string, i, cJSON_IsNumber(bad) ? ", got " : "",
                 cJSON_IsNumber(bad) ? quote(bad, num, sizeof num) : "");
        return AA_EPARSE;
      }
      if (c > 0 && add_exact(h, cap, sz, c) != AA_OK) {
        aa__errf(err, errcap, "out of memory");
        return AA_ENOMEM;
      }
      i++;
    }
    *found = true;
  }
  return AA_OK;
}

static int parse_json(const char *buf, size_t len, aa_replay_hist *h,
                      char *err, size_t errcap) {
  cJSON *root = NULL;
  const cJSON *pools;
  size_t cap = 0;
  bool found = false;
  aa__buf why;
  aa__json_numbers nums;
  int rc;

  aa__buf_init(&why);
  rc = aa__json_strict_check(buf, len, 64, HIST_QUOTE_MAX, &why, &nums);
  if (rc != AA_OK) {
    aa__errf(err, errcap, "histogram: malformed JSON: %s",
             why.data != NULL ? why.data : "out of memory");
    goto out;
  }
  root = cJSON_ParseWithLength(buf, len);

  if (root == NULL || !cJSON_IsObject(root)) {
    aa__errf(err, errcap, "histogram: not a JSON object%s",
             root == NULL ? " (malformed JSON)" : "");
    rc = AA_EPARSE;
    goto out;
  }
  rc = aa__json_text_attach(root, buf, &nums);
  if (rc != AA_OK) {
    aa__errf(err, errcap, "out of memory");
    goto out;
  }
  rc = json_pool(root, "", h, &cap, &found, err, errcap);
  if (rc != AA_OK)
    goto out;
  pools = cJSON_GetObjectItemCaseSensitive(root, "pools");
  if (!found && pools != NULL && (cJSON_IsArray(pools) || cJSON_IsObject(pools))) {
    const cJSON *p;
    int i = 0;
    cJSON_ArrayForEach(p, pools) {
      char where[96];
      if (cJSON_IsObject(p)) {
        if (p->string != NULL)
          snprintf(where, sizeof where, "pools.%.60s.", p->string);
        else
          snprintf(where, sizeof where, "pools[%d].", i);
        rc = json_pool(p, where, h, &cap, &found, err, errcap);
        if (rc != AA_OK)
          goto out;
      }
      i++;
    }
  }
  if (!found) {
    aa__errf(err, errcap, "histogram: no \"hist\" or \"sizes\" member");
    rc = AA_EPARSE;
  }
out:
  aa__json_numbers_free(&nums);
  aa__buf_free(&why);
  cJSON_Delete(root);
  return rc;
}

static bool dec_field(const char *s, const char *e, uint64_t *out) {
  uint64_t v = 0;

  while (s < e && (*s == ' ' || *s == '\t'))
    s++;
  while (e > s && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\r'))
    e--;
  if (s == e)
    return false;
  for (; s < e; s++) {
    unsigned d = (unsigned)(unsigned char)*s - '0';
    if (d > 9 || v > (UINT64_MAX - d) / 10)
      return false;
    v = v * 10 + d;
  }
  *out = v;
  return true;
}

/* CSV: `size,count` lines, or `bucket,count` after a header naming bucket. */
static int parse_csv(const char *buf, size_t len, aa_replay_hist *h, char *err,
                     size_t errcap) {
  const char *p = buf, *end = buf + len;
  uint64_t line = 0;
  size_t cap = 0;
  bool buckets = false, first = true, any = false;

  while (p < end) {
    const char *nl = memchr(p, '\n', (size_t)(end - p));
    const char *le = nl != NULL ? nl : end;
    const char *ls = p, *comma, *t;
    uint64_t a, c;

    line++;
    p = nl != NULL ? nl + 1 : end;
    t = ls;
    while (t < le && (*t == ' ' || *t == '\t' || *t == '\r'))
      t++;
    if (t == le || *t == '#')
      continue;
    if (first && ((*t >= 'a' && *t <= 'z') || (*t >= 'A' && *t <= 'Z'))) {
      first = false;
      buckets = (le - t >= 6 && (memcmp(t, "bucket", 6) == 0 ||
                                 memcmp(t, "Bucket", 6) == 0));
      continue;
    }
    first = false;
    comma = memchr(ls, ',', (size_t)(le - ls));
    if (comma == NULL || memchr(comma + 1, ',', (size_t)(le - comma - 1)) ||
        !dec_field(ls, comma, &a) || !dec_field(comma + 1, le, &c)) {
      aa__errf(err, errcap, "histogram line %llu: expected `%s,count` "
                            "with decimal integers",
               (unsigned long long)line,
               buckets ? "bucket" : "size");
      return AA_EPARSE;
    }
    if (buckets) {
      if (a >= AA_HIST_BUCKETS) {
        aa__errf(err, errcap, "histogram line %llu: bucket %llu is not "
                              "below %d",
                 (unsigned long long)line,
                 (unsigned long long)a, AA_HIST_BUCKETS);
        return AA_EPARSE;
      }
      h->hist[a] += c;
    } else if (c > 0) {
      if (add_exact(h, &cap, a, c) != AA_OK) {
        aa__errf(err, errcap, "out of memory");
        return AA_ENOMEM;
      }
      h->hist[aa_hist_bucket((size_t)a)] += c;
    }
    any = true;
  }
  if (!any) {
    aa__errf(err, errcap, "histogram: no data lines");
    return AA_EPARSE;
  }
  return AA_OK;
}

int aa_replay_hist_parse(const char *buf, size_t len, aa_replay_hist *h,
                         char *err, size_t errcap) {
  size_t i = 0;
  int rc;

  if (h == NULL || (buf == NULL && len > 0)) {
    aa__errf(err, errcap, "aa_replay_hist_parse: NULL argument");
    return AA_EINVAL;
  }
  memset(h, 0, sizeof *h);
  while (i < len && (buf[i] == ' ' || buf[i] == '\t' || buf[i] == '\r' ||
                     buf[i] == '\n'))
    i++;
  if (i < len && buf[i] == '{')
    rc = parse_json(buf, len, h, err, errcap);
  else
    rc = parse_csv(buf, len, h, err, errcap);
  if (rc != AA_OK)
    aa_replay_hist_clear(h);
  return rc;
}

int aa_replay_hist_load_file(const char *path, aa_replay_hist *h, char *err,
                             size_t errcap) {
  FILE *f = NULL;
  char *buf = NULL;
  size_t n = 0, cap = 1 << 16;
  int rc = AA_OK;
  char inner[AA_REPLAY_ERR_CAP];

  if (h != NULL)
    memset(h, 0, sizeof *h);
  if (path == NULL || h == NULL) {
    aa__errf(err, errcap, "aa_replay_hist_load_file: NULL argument");
    return AA_EINVAL;
  }
  f = fopen(path, "rb");
  if (f == NULL) {
    aa__errf(err, errcap, "%s: %s", path, strerror(errno));
    rc = AA_EIO;
    goto out;
  }
  buf = malloc(cap);
  if (buf == NULL) {
    rc = AA_ENOMEM;
    goto out;
  }
  for (;;) {
    size_t r;
    if (n == cap) {
      char *nb;
      if (cap >= HIST_MAX_FILE) {
        aa__errf(err, errcap, "%s: larger than %u MiB", path,
                 HIST_MAX_FILE >> 20);
        rc = AA_EPARSE;
        goto out;
      }
      nb = realloc(buf, cap * 2);
      if (nb == NULL) {
        rc = AA_ENOMEM;
        goto out;
      }
      buf = nb;
      cap *= 2;
    }
    r = fread(buf + n, 1, cap - n, f);
    n += r;
    if (r == 0)
      break;
  }
  if (ferror(f)) {
    aa__errf(err, errcap, "%s: read error", path);
    rc = AA_EIO;
    goto out;
  }
  rc = aa_replay_hist_parse(buf, n, h, inner, sizeof inner);
  if (rc != AA_OK)
    aa__errf(err, errcap, "%s: %s", path, inner);
out:
  if (rc == AA_ENOMEM)
    aa__errf(err, errcap, "out of memory");
  free(buf);
  if (f != NULL)
    fclose(f);
  return rc;
}

/* ---------------------------------------------------------------- synthesis */

void aa_replay_synth_config_init(aa_replay_synth_config *cfg) {
  memset(cfg, 0, sizeof *cfg);
  cfg->events = 1000000;
  cfg->seed = 1;
  cfg->live_target = 1024;
  cfg->time_step_ns = 1000;
  cfg->free_at_end = false;
}

typedef struct pick {
  uint64_t cum;   /* cumulative weight up to and including this entry */
  uint64_t lo;    /* exact size, or bucket's smallest size */
  uint64_t width; /* 0 = exact; else sizes lo .. lo + width - 1 */
} pick;

static uint64_t bucket_width(unsigned i) {
  uint64_t lo = aa_hist_bucket_lower(i);
  uint64_t hi = i + 1 < AA_HIST_BUCKETS ? aa_hist_bucket_lower(i + 1) : 0;

  if (hi > lo)
    return hi - lo;
  return lo / 4 > 0 ? lo / 4 : 1;
}

int aa_replay_synth(const aa_replay_hist *h, const aa_replay_synth_config *cfg,
                    aa_replay_sink sink, void *user, char *err, size_t errcap) {
  pick *picks = NULL;
  size_t np = 0, i;
  uint64_t resid[AA_HIST_BUCKETS];
  uint64_t total = 0;
  uint64_t *live = NULL, *live_sz = NULL;
  size_t nlive = 0, livecap = 0;
  uint64_t live_b = 0; /* live requested bytes */
  const uint64_t cap_b = cfg != NULL ? cfg->live_bytes : 0;
  aa_replay_event batch[BATCH];
  size_t nb = 0;
  uint64_t next_ptr = 0x10000, ev_i = 0, lt;
  aa__rng rng;
  int rc = AA_OK;

  if (h == NULL || cfg == NULL || sink == NULL || cfg->events == 0) {
    aa__errf(err, errcap, "synthesis: bad arguments (events must be > 0)");
    return AA_EINVAL;
  }
  lt = cfg->live_target > 0 ? cfg->live_target : 1;
  memcpy(resid, h->hist, sizeof resid);
  picks = malloc((h->nexact + AA_HIST_BUCKETS) * sizeof *picks);
  if (picks == NULL) {
    rc = AA_ENOMEM;
    goto out;
  }
  for (i = 0; i < h->nexact; i++) {
    unsigned b = aa_hist_bucket((size_t)h->exact[i].size);
    if (h->exact[i].count == 0)
      continue;
    resid[b] = resid[b] > h->exact[i].count ? resid[b] - h->exact[i].count : 0;
    if (total + h->exact[i].count < total) {
      rc = AA_ERANGE;
      goto out;
    }
    total += h->exact[i].count;
    picks[np].cum = total;
    picks[np].lo = h->exact[i].size;
    picks[np].width = 0;
    np++;
  }
  for (i = 0; i < AA_HIST_BUCKETS; i++) {
    if (resid[i] == 0)
      continue;
    if (total + resid[i] < total) {
      rc = AA_ERANGE;
      goto out;
    }
    total += resid[i];
    picks[np].cum = total;
    picks[np].lo = aa_hist_bucket_lower((unsigned)i);
    picks[np].width = bucket_width((unsigned)i);
    np++;
  }
  if (total == 0) {
    aa__errf(err, errcap, "synthesis: the histogram is empty");
    rc = AA_EINVAL;
    goto out;
  }
  aa__rng_seed(&rng, cfg->seed);
  for (ev_i = 0; ev_i < cfg->events || (cfg->free_at_end && nlive > 0); ev_i++) {
    aa_replay_event *e = &batch[nb];
    bool alloc;

    uint64_t sz = 0;

    if (ev_i >= cfg->events) {
      alloc = false; /* draining */
    } else if (nlive == 0) {
      alloc = true;
    } else if (cap_b > 0) {
      /* P(alloc) = 1 - b / (2 B): the live bytes hover near B, the run's
       * peak; a size that would go over it becomes a free */
      alloc = live_b < cap_b && aa__rng_below(&rng, 2 * cap_b) >= live_b;
    } else if (nlive >= 2 * lt) {
      alloc = false;
    } else {
      /* P(alloc) = 1 - k / (2 L), in units of 1/(2L). */
      alloc = aa__rng_below(&rng, 2 * lt) >= nlive;
    }
    if (alloc) {
      uint64_t u = aa__rng_below(&rng, total);
      size_t lo = 0, hi = np - 1;
      while (lo < hi) { /* first pick with cum > u */
        size_t mid = lo + (hi - lo) / 2;
        if (picks[mid].cum > u)
          hi = mid;
        else
          lo = mid + 1;
      }
      sz = picks[lo].lo;
      if (picks[lo].width > 1)
        sz += aa__rng_below(&rng, picks[lo].width);
      if (sz == 0)
        sz = 1;
      if (cap_b > 0 && nlive > 0 && live_b + sz > cap_b)
        alloc = false;
    }
    e->time_ns = ev_i * cfg->time_step_ns;
    e->stream = 0;
    e->thread = 1;
    e->line = ev_i + 1;
    if (alloc) {
      if (nlive == livecap) {
        size_t ncap = livecap == 0 ? 1024 : livecap * 2;
        uint64_t *nl = realloc(live, ncap * sizeof *nl);
        uint64_t *ns;
        if (nl == NULL) {
          rc = AA_ENOMEM;
          goto out;
        }
        live = nl;
        ns = realloc(live_sz, ncap * sizeof *ns);
        if (ns == NULL) {
          rc = AA_ENOMEM;
          goto out;
        }
        live_sz = ns;
        livecap = ncap;
      }
      e->op = 'a';
      e->ptr = next_ptr;
      e->size = sz;
      live[nlive] = next_ptr;
      live_sz[nlive++] = sz;
      live_b += sz;
      next_ptr += 0x200;
    } else {
      uint64_t k = ev_i >= cfg->events ? nlive - 1 : aa__rng_below(&rng, nlive);
      e->op = 'f';
      e->ptr = live[k];
      e->size = 0;
      live_b -= live_sz[k];
      live[k] = live[--nlive];
      live_sz[k] = live_sz[nlive];
    }
    if (++nb == BATCH) {
      rc = sink(user, batch, nb);
      nb = 0;
      if (rc != AA_OK)
        goto out;
    }
  }
  if (nb > 0)
    rc = sink(user, batch, nb);
out:
  if (rc == AA_ENOMEM)
    aa__errf(err, errcap, "out of memory");
  else if (rc == AA_ERANGE)
    aa__errf(err, errcap, "synthesis: histogram counts overflow");
  free(live);
  free(live_sz);
  free(picks);
  return rc;
}
