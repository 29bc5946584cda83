/*
 * policy.c — the policy model's API: accessors, equality,
 * clone, and what a policy means for a pool (aa_policy_pool_config), the
 * adapt loop and telemetry.
 *
 * The model's bottom floor (pool names, defaults, the ladder, the section
 * accessors) is policy_defaults.c's.
 *
 * Entry points: aa_policy_default, aa_policy_parse, aa_policy_load_file,
 * aa_policy_missing (and the _complete forms of parse and load_file),
 * aa_policy_equal, aa_policy_clone, aa_policy_pool_config.
 * Parsing and validation live in policy_parse.c, the writer and merge patch in
 * policy_json.c, aa_policy_apply (the only part that changes a live pool)
 * in policy_apply.c.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "policy_model.h"

int aa_policy_default(aa_policy **out) {
  aa_policy *p;
  if (out == NULL)
    return AA_EINVAL;
  *out = NULL;
  p = malloc(sizeof *p);
  if (p == NULL)
    return AA_ENOMEM;
  aa__policy_defaults(p);
  *out = p;
  return AA_OK;
}

/* The message of a failed call: malloc'd whole into *errmsg (the _msg
 * forms), or cut into err[errcap] (the others); the builder is freed. */
static void hand_back(aa__buf *b, char **errmsg, char *err, size_t errcap) {
  char *m = NULL;
  size_t n = 0;
  if (b->data == NULL && !b->failed)
    aa__buf_puts(b, "");
  if (aa__buf_take(b, &m, &n) != AA_OK)
    m = NULL;
  if (errmsg != NULL)
    *errmsg = m;
  else {
    aa__errcpy(err, errcap, m != NULL ? m : "out of memory");
    free(m);
  }
  aa__buf_free(b);
}

static int parse_doc(const char *json, size_t len, aa_policy **out, aa__buf *err) {
  cJSON *root = NULL;
  aa_policy *p = NULL;
  int rc;

  if (out == NULL) {
    aa__buf_puts(err, "(root): no output pointer given");
    return AA_EINVAL;
  }
  *out = NULL;
  if (json == NULL) {
    aa__buf_puts(err, "(root): no document given");
    return AA_EINVAL;
  }
  rc = aa__policy_parse_tree(json, len, &root, err);
  if (rc != AA_OK)
    goto done;
  p = malloc(sizeof *p);
  if (p == NULL) {
    aa__buf_puts(err, "(root): out of memory");
    rc = AA_ENOMEM;
    goto done;
  }
  rc = aa__policy_from_tree(root, p, err);
  if (rc != AA_OK)
    goto done;
  *out = p;
  p = NULL;
done:
  free(p);
  cJSON_Delete(root);
  return rc;
}

int aa_policy_parse_msg(const char *json, size_t len, aa_policy **out,
                        char **errmsg) {
  aa__buf b;
  int rc;

  if (errmsg != NULL)
    *errmsg = NULL;
  aa__buf_init(&b);
  rc = parse_doc(json, len, out, &b);
  if (rc != AA_OK && errmsg != NULL)
    hand_back(&b, errmsg, NULL, 0);
  aa__buf_free(&b);
  return rc;
}

int aa_policy_parse(const char *json, size_t len, aa_policy **out, char *err,
                    size_t errcap) {
  aa__buf b;
  int rc;

  aa__errcpy(err, errcap, "");
  aa__buf_init(&b);
  rc = parse_doc(json, len, out, &b);
  if (rc != AA_OK)
    hand_back(&b, NULL, err, errcap);
  aa__buf_free(&b);
  return rc;
}

/* ---------------------------------------------------- complete policies */

/* The parts AA_POLICY_COMPLETE_PARTS names: a section of pools, or a top-level
 * member (pool NULL). */
static const struct {
  const char *pool;
  const char *top;
} complete_parts[] = {
    {"device", "pools"},
    {"pinned", "pools"},
    {"host", "pools"},
    {NULL, "adapt"},
    {NULL, "telemetry"},
};

int aa_policy_missing(const char *json, size_t len, size_t *n, char *missing,
                      size_t cap) {
  cJSON *root = NULL;
  aa__buf b;
  size_t count = 0;
  int rc;

  if (n != NULL)
    *n = 0;
  aa__errcpy(missing, cap, "");
  if (json == NULL) {
    aa__errcpy(missing, cap, "(root): no document given");
    return AA_EINVAL;
  }
  aa__buf_init(&b);
  rc = aa__policy_parse_tree(json, len, &root, &b);
  if (rc != AA_OK) {
    hand_back(&b, NULL, missing, cap);
    goto done;
  }
  if (!cJSON_IsObject(root)) {
    aa__errcpy(missing, cap, "(root): expected an object");
    rc = AA_EINVAL;
    goto done;
  }
  for (size_t i = 0; i < sizeof complete_parts / sizeof complete_parts[0]; i++) {
    const cJSON *top = cJSON_GetObjectItemCaseSensitive(root, complete_parts[i].top);
    const cJSON *part = top;
    if (complete_parts[i].pool != NULL)
      part = cJSON_IsObject(top)
                 ? cJSON_GetObjectItemCaseSensitive(top, complete_parts[i].pool)
                 : NULL;
    if (part != NULL && !cJSON_IsNull(part))
      continue;
    aa__buf_printf(&b, "%s%s%s%s", count > 0 ? ", " : "", complete_parts[i].top,
                   complete_parts[i].pool ? "." : "",
                   complete_parts[i].pool ? complete_parts[i].pool : "");
    count++;
  }
  if (n != NULL)
    *n = count;
  hand_back(&b, NULL, missing, cap);
done:
  aa__buf_free(&b);
  cJSON_Delete(root);
  return rc;
}

/* parse_doc, then AA_EINVAL with the parts left out when the document is
 * not complete (*out NULL then). */
static int parse_doc_complete(const char *json, size_t len, aa_policy **out, aa__buf *err) {
  char missing[AA_POLICY_ERR_CAP];
  size_t n = 0;
  int rc = parse_doc(json, len, out, err);
  if (rc != AA_OK)
    return rc;
  rc = aa_policy_missing(json, len, &n, missing, sizeof missing);
  if (rc == AA_OK && n == 0)
    return AA_OK;
  if (rc == AA_OK) {
    aa__buf_printf(err,
                   "(root): not a complete policy: missing %s (a whole policy names " AA_POLICY_COMPLETE_PARTS ")",
                   missing);
    rc = AA_EINVAL;
  } else {
    aa__buf_puts(err, missing);
  }
  aa_policy_free(*out);
  *out = NULL;
  return rc;
}

int aa_policy_parse_complete(const char *json, size_t len, aa_policy **out,
                             char *err, size_t errcap) {
  aa__buf b;
  int rc;

  aa__errcpy(err, errcap, "");
  aa__buf_init(&b);
  rc = parse_doc_complete(json, len, out, &b);
  if (rc != AA_OK)
    hand_back(&b, NULL, err, errcap);
  aa__buf_free(&b);
  return rc;
}

static int not_regular(const char *path, const struct stat *sb, aa__buf *err) {
  aa__buf_printf(err, "%s: not a regular file (%s); a policy is a JSON file",
                 path,
                 S_ISDIR(sb->st_mode)                           ? "a directory"
                 : S_ISFIFO(sb->st_mode)                        ? "a FIFO"
                 : S_ISSOCK(sb->st_mode)                        ? "a socket"
                 : S_ISCHR(sb->st_mode) || S_ISBLK(sb->st_mode) ? "a device"
                                                                : "not a file");
  return AA_EINVAL;
}

/* Reads and parses a policy file; with `complete` it must be a complete
 * policy (parse_doc_complete). */
static int load_file(const char *path, bool complete, aa_policy **out, aa__buf *err) {
  FILE *f = NULL;
  int fd = -1;
  struct stat sb;
  char *buf = NULL;
  size_t len = 0;
  int rc = AA_OK;

  if (out == NULL || path == NULL) {
    aa__buf_printf(err, "(root): no path or output pointer given");
    return AA_EINVAL;
  }
  *out = NULL;
  if (strnlen(path, PATH_MAX) >= PATH_MAX) {
    aa__buf_printf(err,
                   "(path): the policy path is over the limit of %d bytes",
                   PATH_MAX - 1);
    rc = AA_EINVAL;
    goto done;
  }
  /* What is not a regular file is refused by stat() before any open (a
   * socket cannot be opened at all: ENXIO would hide the cause), and again
   * by fstat() on what was opened, in case the name changed in between.
   * O_NONBLOCK: should a FIFO take its place meanwhile, the open must not
   * block start-up. */
  if (stat(path, &sb) != 0) {
    aa__buf_printf(err, "%s: cannot open: %s", path, strerror(errno));
    rc = AA_EIO;
    goto done;
  }
  if (!S_ISREG(sb.st_mode)) {
    rc = not_regular(path, &sb, err);
    goto done;
  }
  fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) {
    aa__buf_printf(err, "%s: cannot open: %s", path, strerror(errno));
    rc = AA_EIO;
    goto done;
  }
  if (fstat(fd, &sb) != 0) {
    aa__buf_printf(err, "%s: cannot stat: %s", path, strerror(errno));
    rc = AA_EIO;
    goto done;
  }
  if (!S_ISREG(sb.st_mode)) {
    rc = not_regular(path, &sb, err);
    goto done;
  }
  if (sb.st_size > (off_t)AA_POLICY_MAX_BYTES) {
    aa__buf_printf(err, "%s: document is over the %u-byte limit",
                   path, (unsigned)AA_POLICY_MAX_BYTES);
    rc = AA_EPARSE;
    goto done;
  }
  f = fdopen(fd, "rb");
  if (f == NULL) {
    aa__buf_printf(err, "%s: cannot open: %s", path, strerror(errno));
    rc = AA_EIO;
    goto done;
  }
  fd = -1; /* f owns it */
  /* Read one byte past the limit so an oversized file is recognised. */
  buf = malloc(AA_POLICY_MAX_BYTES + 1);
  if (buf == NULL) {
    aa__buf_printf(err, "%s: out of memory", path);
    rc = AA_ENOMEM;
    goto done;
  }
  len = fread(buf, 1, AA_POLICY_MAX_BYTES + 1, f);
  if (ferror(f)) {
    aa__buf_printf(err, "%s: read error: %s", path, strerror(errno));
    rc = AA_EIO;
    goto done;
  }
  if (len > AA_POLICY_MAX_BYTES) {
    aa__buf_printf(err,
                   "%s: document is over the %u-byte limit", path,
                   (unsigned)AA_POLICY_MAX_BYTES);
    rc = AA_EPARSE;
    goto done;
  }
  /* "path: " first; the parser's message follows, whole */
  aa__buf_printf(err, "%s: ", path);
  rc = complete ? parse_doc_complete(buf, len, out, err) : parse_doc(buf, len, out, err);
done:
  free(buf);
  if (f != NULL)
    fclose(f);
  if (fd >= 0)
    close(fd);
  return rc;
}

int aa_policy_load_file_msg(const char *path, aa_policy **out, char **errmsg) {
  aa__buf b;
  int rc;

  if (errmsg != NULL)
    *errmsg = NULL;
  aa__buf_init(&b);
  rc = load_file(path, false, out, &b);
  if (rc != AA_OK && errmsg != NULL)
    hand_back(&b, errmsg, NULL, 0);
  aa__buf_free(&b);
  return rc;
}

int aa_policy_load_file(const char *path, aa_policy **out, char *err,
                        size_t errcap) {
  aa__buf b;
  int rc;

  aa__errcpy(err, errcap, "");
  aa__buf_init(&b);
  rc = load_file(path, false, out, &b);
  if (rc != AA_OK)
    hand_back(&b, NULL, err, errcap);
  aa__buf_free(&b);
  return rc;
}

int aa_policy_load_file_complete_msg(const char *path, aa_policy **out, char **errmsg) {
  aa__buf b;
  int rc;

  if (errmsg != NULL)
    *errmsg = NULL;
  aa__buf_init(&b);
  rc = load_file(path, true, out, &b);
  if (rc != AA_OK && errmsg != NULL)
    hand_back(&b, errmsg, NULL, 0);
  aa__buf_free(&b);
  return rc;
}

int aa_policy_load_file_complete(const char *path, aa_policy **out, char *err,
                                 size_t errcap) {
  aa__buf b;
  int rc;

  aa__errcpy(err, errcap, "");
  aa__buf_init(&b);
  rc = load_file(path, true, out, &b);
  if (rc != AA_OK)
    hand_back(&b, NULL, err, errcap);
  aa__buf_free(&b);
  return rc;
}

static bool pool_equal(const aa__pool_policy *a, const aa__pool_policy *b) {
  if (a->slab_size != b->slab_size || a->max_small != b->max_small ||
      a->classes_kind != b->classes_kind || a->tcache_blocks != b->tcache_blocks ||
      a->tcache_bytes != b->tcache_bytes || a->large_mode != b->large_mode ||
      a->large_cache_bytes != b->large_cache_bytes ||
      a->large_page_bytes != b->large_page_bytes || a->large_map_runs != b->large_map_runs ||
      a->large_map_run_pages != b->large_map_run_pages ||
      a->large_map_run_min_bytes != b->large_map_run_min_bytes ||
      a->large_stitch != b->large_stitch || a->large_stitch_grow != b->large_stitch_grow ||
      a->large_stitch_share != b->large_stitch_share ||
      a->large_plan != b->large_plan ||
      a->large_stream_wait != b->large_stream_wait ||
      a->limit_bytes != b->limit_bytes || a->managed != b->managed ||
      a->advise_preferred != b->advise_preferred ||
      a->advise_accessed_by != b->advise_accessed_by ||
      a->advise_read_mostly != b->advise_read_mostly ||
      a->allow_oversubscribe != b->allow_oversubscribe)
    return false;
  if (a->classes_kind == AA__CLASSES_LADDER)
    return a->ladder_min == b->ladder_min &&
           a->ladder_per_doubling == b->ladder_per_doubling;
  if (a->n_explicit != b->n_explicit)
    return false;
  for (uint32_t i = 0; i < a->n_explicit; i++) {
    const aa_class_spec *x = &a->explicit_classes[i];
    const aa_class_spec *y = &b->explicit_classes[i];
    if (x->block_size != y->block_size || x->cache_limit != y->cache_limit ||
        x->prefill != y->prefill)
      return false;
  }
  return true;
}

static bool adapt_equal(const aa_adapt_params *a, const aa_adapt_params *b) {
  return a->enabled == b->enabled && a->interval_ms == b->interval_ms &&
         a->max_classes == b->max_classes &&
         a->max_adds_per_interval == b->max_adds_per_interval &&
         a->min_requests == b->min_requests &&
         a->hot_fraction == b->hot_fraction &&
         a->waste_threshold == b->waste_threshold &&
         a->miss_rate_threshold == b->miss_rate_threshold &&
         a->prefill_max_bytes == b->prefill_max_bytes &&
         a->cold_intervals == b->cold_intervals &&
         a->trim_threshold_bytes == b->trim_threshold_bytes &&
         a->min_class_age == b->min_class_age &&
         a->readd_cooldown == b->readd_cooldown &&
         a->grow_cooldown == b->grow_cooldown &&
         a->trim_cooldown == b->trim_cooldown;
}

bool aa_policy_equal(const aa_policy *a, const aa_policy *b) {
  if (a == NULL || b == NULL)
    return a == b;
  if (strcmp(a->name, b->name) != 0 ||
      strcmp(a->description, b->description) != 0)
    return false;
  for (int i = 0; i < AA__POLICY_POOLS; i++) {
    if (!pool_equal(&a->pools[i], &b->pools[i]))
      return false;
  }
  if (a->n_regions != b->n_regions)
    return false;
  for (uint32_t i = 0; i < a->n_regions; i++) {
    if (strcmp(a->regions[i].name, b->regions[i].name) != 0 ||
        !pool_equal(&a->regions[i].pool, &b->regions[i].pool))
      return false;
  }
  if (!adapt_equal(&a->adapt, &b->adapt))
    return false;
  return a->telemetry.snapshot_interval_ms == b->telemetry.snapshot_interval_ms &&
         a->telemetry.trace == b->telemetry.trace &&
         a->telemetry.histogram == b->telemetry.histogram &&
         a->telemetry.retention_bytes == b->telemetry.retention_bytes &&
         a->telemetry.retention_age_s == b->telemetry.retention_age_s &&
         a->telemetry.trace_sample == b->telemetry.trace_sample &&
         a->telemetry.trace_min_bytes == b->telemetry.trace_min_bytes &&
         a->telemetry.trace_seconds == b->telemetry.trace_seconds &&
         a->telemetry.trace_max_events == b->telemetry.trace_max_events;
}

aa_policy *aa_policy_clone(const aa_policy *p) {
  aa_policy *c;
  if (p == NULL)
    return NULL;
  c = malloc(sizeof *c);
  if (c == NULL)
    return NULL;
  memcpy(c, p, sizeof *c);
  return c;
}

void aa_policy_free(aa_policy *p) { free(p); }

uint64_t aa_policy_version(const aa_policy *p) {
  return p == NULL ? 0 : p->version;
}

void aa_policy_set_version(aa_policy *p, uint64_t v) {
  if (p != NULL)
    p->version = v;
}

const char *aa_policy_name(const aa_policy *p) {
  return p == NULL ? "" : p->name;
}

/* The class table of one pool section: *n gets the full count. */
static size_t pool_classes(const aa__pool_policy *pp, aa_class_spec *out,
                           size_t cap) {
  if (pp->classes_kind == AA__CLASSES_LADDER)
    return aa__ladder_expand(pp->ladder_min, pp->max_small,
                             pp->ladder_per_doubling, out, cap);
  for (size_t i = 0; i < pp->n_explicit && i < cap; i++)
    out[i] = pp->explicit_classes[i];
  return pp->n_explicit;
}

int aa_policy_pool_config(const aa_policy *p, const char *pool,
                          aa_pool_config *cfg, aa_class_spec *classes,
                          size_t cap, size_t *n) {
  const aa__pool_policy *pp = NULL;
  size_t count;
  int rc;

  if (n != NULL)
    *n = 0;
  if (p == NULL || (classes == NULL && cap > 0))
    return AA_EINVAL;
  rc = aa__policy_section(p, pool, &pp);
  if (rc != AA_OK)
    return rc;
  if (cfg != NULL) {
    cfg->slab_size = (size_t)pp->slab_size;
    cfg->max_small = (size_t)pp->max_small;
    if (pp->classes_kind == AA__CLASSES_LADDER) {
      cfg->min_block = (size_t)pp->ladder_min;
      cfg->classes_per_doubling = pp->ladder_per_doubling;
    } else {
      cfg->min_block = (size_t)pp->explicit_classes[0].block_size;
    }
    cfg->tcache_blocks = pp->tcache_blocks;
    cfg->tcache_bytes = (size_t)pp->tcache_bytes;
    cfg->large_mode = pp->large_mode;
    cfg->large_cache_bytes = (size_t)pp->large_cache_bytes;
    cfg->large_page_bytes = (size_t)pp->large_page_bytes;
    cfg->large_map_runs = pp->large_map_runs ? 1 : 0;
    cfg->large_map_run_pages = (int)pp->large_map_run_pages;
    cfg->large_map_run_min_bytes = (size_t)pp->large_map_run_min_bytes;
    cfg->large_stitch = pp->large_stitch ? (pp->large_stitch_grow ? 2 : 1) : 0;
    cfg->large_stitch_share = pp->large_stitch_share;
    cfg->large_plan = pp->large_plan ? 1 : 0;
    cfg->large_stream_wait = pp->large_stream_wait ? 1 : -1;
    cfg->limit_bytes = (size_t)pp->limit_bytes;
    cfg->telemetry = p->telemetry.histogram;
  }
  count = pool_classes(pp, classes, cap);
  if (n != NULL)
    *n = count;
  /* classes NULL with cap 0 asks for cfg and the count only. */
  if (classes == NULL)
    return AA_OK;
  return count > cap ? AA_ERANGE : AA_OK;
}

int aa_policy_pool_backend(const aa_policy *p, const char *pool, bool *managed,
                           aa_managed_config *mc) {
  const aa__pool_policy *pp = NULL;
  int rc;

  if (managed != NULL)
    *managed = false;
  if (mc != NULL)
    aa_managed_config_init(mc);
  if (p == NULL)
    return AA_EINVAL;
  rc = aa__policy_section(p, pool, &pp);
  if (rc != AA_OK)
    return rc;
  if (managed != NULL)
    *managed = pp->managed;
  if (mc != NULL && pp->managed) {
    mc->preferred_location = pp->advise_preferred;
    mc->accessed_by = pp->advise_accessed_by;
    mc->read_mostly = pp->advise_read_mostly;
    mc->allow_oversubscribe = pp->allow_oversubscribe;
  }
  return AA_OK;
}

void aa_policy_adapt_params(const aa_policy *p, aa_adapt_params *out) {
  if (out == NULL)
    return;
  if (p == NULL)
    aa_adapt_params_default(out);
  else
    *out = p->adapt;
}

void aa_policy_telemetry_params(const aa_policy *p, aa_telemetry_params *out) {
  if (out == NULL)
    return;
  if (p == NULL)
    aa_telemetry_params_default(out);
  else
    *out = p->telemetry;
}

/* ------------------------------------------------------------- proposals */

/* The checks a parsed explicit table gets (policy_parse.c), on a table
 * built in memory: ascending multiples of AA_BLOCK_ALIGN topped by
 * max_small, each entry within the parser's bounds, the prefill within
 * limit_bytes and adapt.prefill_max_bytes. */
static int classes_check(const aa_policy *p, const aa__pool_policy *pp,
                         const char *section, const aa_class_spec *classes, size_t n,
                         char *err, size_t errcap) {
  uint64_t total = 0;
  if (n == 0 || n > AA_MAX_CLASSES || classes[n - 1].block_size != pp->max_small) {
    aa__errf(err, errcap, "pools.%s.classes: a table of 1 to %d classes topped by "
                          "max_small %llu is due",
             section, AA_MAX_CLASSES,
             (unsigned long long)pp->max_small);
    return AA_EINVAL;
  }
  for (size_t i = 0; i < n; i++) {
    const aa_class_spec *cs = &classes[i];
    if (cs->block_size == 0 || cs->block_size % AA_BLOCK_ALIGN != 0 ||
        (i > 0 && cs->block_size <= classes[i - 1].block_size) ||
        cs->cache_limit > 65536 || cs->prefill > (1u << 20)) {
      aa__errf(err, errcap, "pools.%s.classes[%zu]: not a class the policy can hold",
               section, i);
      return AA_EINVAL;
    }
    total += (uint64_t)cs->prefill * cs->block_size;
  }
  if ((pp->limit_bytes != 0 && total > pp->limit_bytes) ||
      total > p->adapt.prefill_max_bytes) {
    aa__errf(err, errcap, "pools.%s.classes: the prefill (%llu bytes) is over "
                          "limit_bytes or adapt.prefill_max_bytes",
             section,
             (unsigned long long)total);
    return AA_EINVAL;
  }
  return AA_OK;
}

int aa_policy_with_classes(const aa_policy *base, const char *section,
                           const aa_class_spec *classes, size_t n, aa_policy **out,
                           char *err, size_t errcap) {
  aa_policy *next = NULL;
  const aa__pool_policy *cur = NULL;
  aa__pool_policy *pp;
  int rc;

  if (out == NULL)
    return AA_EINVAL;
  *out = NULL;
  if (base == NULL || section == NULL || (classes == NULL && n > 0))
    return AA_EINVAL;
  rc = aa__policy_section(base, section, &cur);
  if (rc == AA_ENOENT && base->n_regions >= AA_POLICY_MAX_REGIONS) {
    aa__errf(err, errcap, "pools.%s: no room for another region section (%d at most)",
             section, AA_POLICY_MAX_REGIONS);
    return AA_ELIMIT;
  }
  if (rc != AA_OK && rc != AA_ENOENT)
    return rc;
  next = aa_policy_clone(base);
  if (next == NULL)
    return AA_ENOMEM;
  if (rc == AA_ENOENT) {
    /* a region without a section: one made now, from pools.device (the
     * fields a region section leaves out are pools.device's), in name order */
    uint32_t at = 0;
    while (at < next->n_regions && strcmp(next->regions[at].name, section + 8) < 0)
      at++;
    memmove(&next->regions[at + 1], &next->regions[at],
            (next->n_regions - at) * sizeof next->regions[0]);
    memset(&next->regions[at], 0, sizeof next->regions[at]);
    snprintf(next->regions[at].name, sizeof next->regions[at].name, "%s", section + 8);
    next->regions[at].pool = next->pools[0];
    next->n_regions++;
  }
  rc = aa__policy_section(next, section, &cur);
  if (rc != AA_OK)
    goto fail;
  pp = (aa__pool_policy *)cur; /* next is ours */
  rc = classes_check(next, pp, section, classes, n, err, errcap);
  if (rc != AA_OK)
    goto fail;
  pp->classes_kind = AA__CLASSES_EXPLICIT;
  pp->n_explicit = (uint32_t)n;
  memcpy(pp->explicit_classes, classes, n * sizeof classes[0]);
  *out = next;
  return AA_OK;
fail:
  aa_policy_free(next);
  return rc;
}
