/*
 * runtime_config.c — a runtime's configuration: the one place that reads the
 * environment (aa_runtime_config_from_env: ADAPTALLOC_MODEL, _POLICY,
 * _POLICY_DIR, _DB, _HTTP, _TOKEN, _TRACE, _QUIET, RANK, LOCAL_RANK,
 * WORLD_SIZE), the configuration the default runtime starts with
 * (aa_runtime_configure, else the environment), and the rules every
 * configuration passes when a runtime takes it (aa__rt_apply_config: a
 * setting over its buffer, a model that is not a plain name, a token no
 * client can send are refused, said in one line, and never cut short).
 *
 * Entry points: aa_runtime_config_init, aa_runtime_config_from_env,
 * aa_runtime_configure, aa__rt_default_config, aa__rt_apply_config.
 */
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "adaptalloc/runtime.h"
#include "runtime_internal.h"

void aa_runtime_config_init(aa_runtime_config *cfg) {
  if (cfg == NULL)
    return;
  memset(cfg, 0, sizeof(*cfg));
  cfg->size = sizeof(*cfg);
  cfg->version = AA_RUNTIME_CONFIG_VERSION;
  cfg->trace = -1;
  cfg->rank = -1;
  cfg->local_rank = -1;
  cfg->world_size = -1;
}

int aa__rt_config_check(const aa_runtime_config *cfg) {
  if (cfg == NULL)
    return AA_OK;
  if (cfg->size != sizeof(aa_runtime_config) || cfg->version != AA_RUNTIME_CONFIG_VERSION)
    return AA_EINVAL;
  if (cfg->trace < -1 || cfg->trace > 1 || cfg->rank < -1 || cfg->local_rank < -1 ||
      cfg->world_size < -1 || cfg->world_size == 0)
    return AA_EINVAL;
  return AA_OK;
}

/* ------------------------------------------------------------ environment */

/* A non-negative decimal number in [lo, hi] and nothing else (no sign, no
 * space, no suffix): *out, AA_OK; else AA_EINVAL. */
static int parse_count(const char *s, long lo, long hi, int *out) {
  long v = 0;
  if (s[0] == '\0')
    return AA_EINVAL;
  for (const char *p = s; *p != '\0'; p++) {
    if (*p < '0' || *p > '9')
      return AA_EINVAL;
    v = v * 10 + (*p - '0');
    if (v > hi)
      return AA_EINVAL;
  }
  if (v < lo)
    return AA_EINVAL;
  *out = (int)v;
  return AA_OK;
}

/* Whether a refused value of an environment variable is to be said: the
 * environment is read again (aa_runtime_configure's caller, the default
 * runtime's start, a tool checking its port), and each refusal is said once
 * a process, not once a read. One slot per variable (name, a static
 * string literal), keyed by a hash of the value it last said: a new value (setenv
 * between reads) is said again. */
#define REFUSED_SLOTS 8
static pthread_mutex_t refused_mu = PTHREAD_MUTEX_INITIALIZER;
static struct {
  const char *name;
  uint64_t value_hash;
} refusals[REFUSED_SLOTS];

static bool refusal_is_new(const char *name, const char *value) {
  uint64_t h = 1469598103934665603ull; /* FNV-1a */
  bool is_new = true;
  size_t i;
  for (const char *p = value; *p != '\0'; p++)
    h = (h ^ (unsigned char)*p) * 1099511628211ull;
  pthread_mutex_lock(&refused_mu);
  for (i = 0; i < REFUSED_SLOTS && refusals[i].name != NULL; i++)
    if (strcmp(refusals[i].name, name) == 0)
      break;
  if (i < REFUSED_SLOTS) {
    is_new = refusals[i].name == NULL || refusals[i].value_hash != h;
    refusals[i].name = name;
    refusals[i].value_hash = h;
  }
  pthread_mutex_unlock(&refused_mu);
  return is_new;
}

/* $name as a number in [lo, hi]; -1 when unset or empty, and when it is not
 * such a number (said in one line, once a process: it is then treated as
 * unset). */
static int env_count(const char *name, long lo, long hi) {
  const char *s = getenv(name);
  int v = -1;
  if (s == NULL || s[0] == '\0')
    return -1;
  if (parse_count(s, lo, hi, &v) != AA_OK) {
    if (refusal_is_new(name, s))
      aa__rt_log("%s is \"%s\": expected a number from %ld to %ld; treated as unset", name,
                 s, lo, hi);
    return -1;
  }
  return v;
}

/* $name, NULL when unset or empty. */
static const char *env_str(const char *name) {
  const char *s = getenv(name);
  return s != NULL && s[0] != '\0' ? s : NULL;
}

int aa_runtime_config_from_env(aa_runtime_config *cfg) {
  const char *t;
  if (cfg == NULL)
    return AA_EINVAL;
  aa_runtime_config_init(cfg);
  cfg->model = env_str("ADAPTALLOC_MODEL");
  cfg->policy_path = env_str("ADAPTALLOC_POLICY");
  cfg->policy_dir = env_str("ADAPTALLOC_POLICY_DIR");
  cfg->db = env_str("ADAPTALLOC_DB");
  cfg->http = env_str("ADAPTALLOC_HTTP");
  cfg->token = env_str("ADAPTALLOC_TOKEN");
  t = env_str("ADAPTALLOC_TRACE");
  if (t != NULL) {
    if (strcmp(t, "1") == 0) {
      cfg->trace = 1;
    } else {
      cfg->trace = 0;
      if (strcmp(t, "0") != 0 && !aa__rt_is_off(t) && refusal_is_new("ADAPTALLOC_TRACE", t))
        aa__rt_log("ADAPTALLOC_TRACE is \"%s\": expected 1 (on), or 0 or off; "
                   "tracing stays off",
                   t);
    }
  }
  /* set at all, to any value (even empty): quiet */
  cfg->quiet = getenv("ADAPTALLOC_QUIET") != NULL;
  /* torch.distributed's launchers set these; LOCAL_RANK's bound is the one
   * of the "+rank" port (docs/http.md) */
  cfg->rank = env_count("RANK", 0, 1L << 30);
  cfg->local_rank = env_count("LOCAL_RANK", 0, 65535);
  cfg->world_size = env_count("WORLD_SIZE", 1, 1L << 30);
  return AA_OK;
}

/* ------------------------------------------------ the default's configuration */

/* What aa_runtime_configure set: a deep copy (the strings malloc'd), used by
 * the default runtime's start instead of the environment. */
static pthread_mutex_t configured_mu = PTHREAD_MUTEX_INITIALIZER;
static bool configured;
static bool default_taken; /* the default runtime read its configuration */
static aa_runtime_config configured_cfg;

static void free_strings(aa_runtime_config *c) {
  free((char *)c->model);
  free((char *)c->policy_path);
  free((char *)c->policy_dir);
  free((char *)c->db);
  free((char *)c->http);
  if (c->token != NULL) {
    explicit_bzero((char *)c->token, strlen(c->token));
    free((char *)c->token);
  }
}

/* *dst = a copy of src (NULL and "" stay NULL); false when out of memory. */
static bool dup_str(const char **dst, const char *src) {
  *dst = NULL;
  if (src == NULL || src[0] == '\0')
    return true;
  *dst = strdup(src);
  return *dst != NULL;
}

int aa_runtime_configure(const aa_runtime_config *cfg) {
  aa_runtime_config copy;
  int rc = AA_OK;

  if (cfg == NULL || aa__rt_config_check(cfg) != AA_OK)
    return AA_EINVAL;
  copy = *cfg;
  copy.model = copy.policy_path = copy.policy_dir = copy.db = copy.http = copy.token = NULL;
  if (!dup_str(&copy.model, cfg->model) || !dup_str(&copy.policy_path, cfg->policy_path) ||
      !dup_str(&copy.policy_dir, cfg->policy_dir) || !dup_str(&copy.db, cfg->db) ||
      !dup_str(&copy.http, cfg->http) || !dup_str(&copy.token, cfg->token)) {
    free_strings(&copy);
    return AA_ENOMEM;
  }
  pthread_mutex_lock(&configured_mu);
  /* the default runtime reads it once, at its start: later is too late */
  if (default_taken) {
    rc = AA_EBUSY;
  } else {
    if (configured)
      free_strings(&configured_cfg);
    configured_cfg = copy;
    configured = true;
    memset(&copy, 0, sizeof(copy));
  }
  pthread_mutex_unlock(&configured_mu);
  free_strings(&copy);
  return rc;
}

/* Each field of over that is set (a non-empty string, trace, rank, ... >= 0,
 * quiet true) replaces base's. */
static void overlay(aa_runtime_config *base, const aa_runtime_config *over) {
#define AA__OVER_STR(f)                      \
  if (over->f != NULL && over->f[0] != '\0') \
  base->f = over->f
  AA__OVER_STR(model);
  AA__OVER_STR(policy_path);
  AA__OVER_STR(policy_dir);
  AA__OVER_STR(db);
  AA__OVER_STR(http);
  AA__OVER_STR(token);
#undef AA__OVER_STR
  if (over->trace >= 0)
    base->trace = over->trace;
  if (over->quiet)
    base->quiet = true;
  if (over->rank >= 0)
    base->rank = over->rank;
  if (over->local_rank >= 0)
    base->local_rank = over->local_rank;
  if (over->world_size >= 1)
    base->world_size = over->world_size;
}

void aa__rt_default_config(aa_runtime *rt, const aa_runtime_config *over) {
  aa_runtime_config cfg;
  pthread_mutex_lock(&configured_mu);
  if (configured)
    cfg = configured_cfg;
  else
    aa_runtime_config_from_env(&cfg);
  if (over != NULL)
    overlay(&cfg, over);
  aa__rt_apply_config(rt, &cfg);
  default_taken = true;
  pthread_mutex_unlock(&configured_mu);
}

/* ------------------------------------------------------------------ rules */

/* Copies the setting `name` into dst. A value that does not fit is never
 * cut short (a truncated token would be accepted by prefix, a truncated
 * path names a file the user never gave): dst stays empty, *refused is set
 * and one line names the setting, its length and the limit. */
static void copy_setting(char *dst, size_t cap, const char *src,
                         const char *name, bool *refused) {
  size_t n = src != NULL ? strlen(src) : 0;
  *refused = false;
  dst[0] = '\0';
  if (n >= cap) {
    *refused = true;
    aa__rt_log("%s is %zu bytes, over the limit of %zu bytes: refused", name,
               n, cap - 1);
    return;
  }
  if (n > 0)
    memcpy(dst, src, n + 1);
}

static const char *or_default(const char *v, const char *fallback) {
  return v != NULL && v[0] != '\0' ? v : fallback;
}

bool aa__rt_is_off(const char *v) { return v != NULL && strcasecmp(v, "off") == 0; }

int aa__rt_token_check(const char *token, char *why, size_t cap) {
  for (size_t i = 0; token[i] != '\0'; i++) {
    unsigned char c = (unsigned char)token[i];
    if (c > 0x20 && c < 0x7F)
      continue;
    snprintf(why, cap,
             "byte %zu of %zu is 0x%02x%s; a token is printable ASCII without "
             "spaces (0x21 to 0x7e), the bytes a client can send after "
             "\"Bearer \"",
             i + 1, strlen(token), c,
             c == '\n' && token[i + 1] == '\0' ? " (a trailing newline)"
             : c == '\r' || c == '\n'          ? " (a line break)"
             : c == ' '                        ? " (a space)"
             : c < 0x20 || c == 0x7F           ? " (a control byte)"
                                               : " (not ASCII)");
    return AA_EINVAL;
  }
  return AA_OK;
}

int aa__rt_model_check(const char *model, char *why, size_t cap) {
  size_t n = strlen(model);
  if (n == 0) {
    snprintf(why, cap, "it is empty");
    return AA_EINVAL;
  }
  if (model[0] == '.') {
    snprintf(why, cap, "it starts with a dot (\".\", \"..\" and hidden names "
                       "are not model names)");
    return AA_EINVAL;
  }
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)model[i];
    if (c == '/' || c == '\\') {
      snprintf(why, cap, "byte %zu is '%c' (a model name is a plain name: "
                         "no directory part)",
               i + 1, c);
      return AA_EINVAL;
    }
    if (c < 0x20 || c == 0x7F) {
      snprintf(why, cap, "byte %zu is the control byte 0x%02x", i + 1, c);
      return AA_EINVAL;
    }
  }
  return AA_OK;
}

#ifndef AA_INSTALLED_POLICY_DIR
#define AA_INSTALLED_POLICY_DIR ""
#endif
/* The installed policies relative to the installed library's folder and to
 * the programs' (runtime/CMakeLists.txt: "../share/adaptalloc/policies" for
 * the usual lib/ and bin/), so that a tree installed, or copied, under any
 * prefix finds its own. */
#ifndef AA_POLICY_RELDIR_FROM_LIB
#define AA_POLICY_RELDIR_FROM_LIB ""
#endif
#ifndef AA_POLICY_RELDIR_FROM_BIN
#define AA_POLICY_RELDIR_FROM_BIN ""
#endif

static bool is_dir(const char *path) {
  struct stat st;
  return path[0] != '\0' && stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* Adds dir to dirs unless it is empty, too long or there already (the same
 * folder by its real path when it exists). */
static void add_dir(char dirs[][AA__RT_PATH_MAX], size_t *n, size_t cap, const char *dir) {
  char real[PATH_MAX];
  const char *key = dir;
  if (dir[0] == '\0' || *n == cap || strlen(dir) >= AA__RT_PATH_MAX)
    return;
  if (realpath(dir, real) != NULL && strlen(real) < AA__RT_PATH_MAX)
    key = real;
  for (size_t i = 0; i < *n; i++)
    if (strcmp(dirs[i], key) == 0)
      return;
  /* shorter than AA__RT_PATH_MAX either way (checked above): copied whole */
  memcpy(dirs[(*n)++], key, strlen(key) + 1);
}

/* an object of this file: dladdr names the file it was loaded from */
static const char where_am_i = 0;

size_t aa__rt_policy_dirs(char dirs[][AA__RT_PATH_MAX], size_t cap) {
  static const char *const rel[] = {AA_POLICY_RELDIR_FROM_LIB, AA_POLICY_RELDIR_FROM_BIN,
                                    "policies"};
  size_t n = 0;
  Dl_info info;
  char obj[PATH_MAX];

  add_dir(dirs, &n, cap, "./policies");
  /* the folder of the file this code was loaded from: libadaptalloc.so, or
   * the program it was linked into */
  if (dladdr(&where_am_i, &info) != 0 && info.dli_fname != NULL &&
      realpath(info.dli_fname, obj) != NULL) {
    char *slash = strrchr(obj, '/');
    if (slash != NULL) {
      *slash = '\0';
      for (size_t i = 0; i < sizeof rel / sizeof rel[0]; i++) {
        char dir[PATH_MAX + 64];
        if (rel[i][0] == '\0')
          continue;
        snprintf(dir, sizeof dir, "%s/%s", obj, rel[i]);
        if (is_dir(dir))
          add_dir(dirs, &n, cap, dir);
      }
    }
  }
  add_dir(dirs, &n, cap, AA_INSTALLED_POLICY_DIR); /* the prefix it was built for */
  return n;
}

/* ADAPTALLOC_DB may hold "{rank}", any number of times: each is replaced by
 * the rank so that ranks on one host write distinct files. False when the
 * result does not fit in cap (out is then empty: never a shortened path). */
bool aa__rt_expand_rank(const char *in, int rank, char *out, size_t cap) {
  char rtext[16];
  size_t w = 0, rlen;
  snprintf(rtext, sizeof rtext, "%d", rank < 0 ? 0 : rank);
  rlen = strlen(rtext);
  while (*in != '\0') {
    const char *piece = in;
    size_t plen = 1;
    if (strncmp(in, "{rank}", 6) == 0) {
      piece = rtext;
      plen = rlen;
      in += 6;
    } else {
      in++;
    }
    if (plen >= cap - w) {
      out[0] = '\0';
      return false;
    }
    memcpy(out + w, piece, plen);
    w += plen;
  }
  out[w] = '\0';
  return true;
}

void aa__rt_apply_config(aa_runtime *rt, const aa_runtime_config *cfg) {
  aa_runtime_config empty;
  char why[256];
  bool refused;
  if (cfg == NULL) {
    aa_runtime_config_init(&empty);
    cfg = &empty;
  }
  copy_setting(rt->model, sizeof(rt->model), or_default(cfg->model, "default"),
               "ADAPTALLOC_MODEL", &refused);
  if (!refused && aa__rt_model_check(rt->model, why, sizeof(why)) != AA_OK) {
    /* the name is not echoed whole here: the log line escapes it anyway,
     * but a name that is a path is not worth repeating */
    aa__rt_log("ADAPTALLOC_MODEL is not a plain name: %s; a model name has "
               "no '/' or '\\', does not start with a dot and holds no control "
               "byte: refused, the model is \"default\"",
               why);
    refused = true;
  }
  if (refused)
    snprintf(rt->model, sizeof(rt->model), "default");
  copy_setting(rt->policy_path, sizeof(rt->policy_path), or_default(cfg->policy_path, ""),
               "ADAPTALLOC_POLICY", &rt->policy_refused);
  /* unset: "" (aa__rt_load_start_policy looks in every folder of
   * aa__rt_policy_dirs for the model's file) */
  copy_setting(rt->policy_dir, sizeof(rt->policy_dir), or_default(cfg->policy_dir, ""),
               "ADAPTALLOC_POLICY_DIR", &refused);
  rt->policy_refused = rt->policy_refused || refused;
  copy_setting(rt->db, sizeof(rt->db), or_default(cfg->db, "./adaptalloc.db"), "ADAPTALLOC_DB",
               &rt->db_refused);
  copy_setting(rt->http, sizeof(rt->http), or_default(cfg->http, "127.0.0.1:9100"),
               "ADAPTALLOC_HTTP", &rt->http_refused);
  copy_setting(rt->token, sizeof(rt->token), or_default(cfg->token, ""), "ADAPTALLOC_TOKEN",
               &refused);
  /* a token that cannot be held whole keeps the server off: serving with a
   * shorter one (or none) would accept what the operator never set */
  rt->http_refused = rt->http_refused || refused;
  /* a token no client can send (a trailing newline from `$(cat file)`, a
   * control byte) keeps it off too: served, it would make the policy
   * unchangeable while telemetry stayed open, and serving without it would
   * open the policy to every client. The token itself is never logged. */
  /* "off": no token at all, the opt-out for loopback (the server refuses
   * it elsewhere, as it refuses no token); unset: one is made at start */
  rt->token_off = !refused && aa__rt_is_off(rt->token);
  if (rt->token_off)
    explicit_bzero(rt->token, sizeof(rt->token));
  if (!refused && aa__rt_token_check(rt->token, why, sizeof(why)) != AA_OK) {
    aa__rt_log("ADAPTALLOC_TOKEN is refused: %s; the server stays off", why);
    explicit_bzero(rt->token, sizeof(rt->token));
    rt->http_refused = true;
  }
  rt->trace = cfg->trace == 1;
  rt->quiet = cfg->quiet;
  rt->rank = cfg->rank >= 0 ? cfg->rank : -1;
  rt->local_rank = cfg->local_rank >= 0 ? cfg->local_rank : -1;
  rt->world_size = cfg->world_size >= 1 ? cfg->world_size : -1;
}
