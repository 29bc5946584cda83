/*
 * output.c — adaptalloc-replay's output: the progress bar on stderr, byte
 * formatting, the run report and the compare table; the JSON head and
 * result that run, compare and suggest print.
 */
#include <stdlib.h>
#include <string.h>

#include "replay_tool.h"
#include "adaptalloc/internal/util.h"

void progress_init(tool_progress *p, bool on) {
  memset(p, 0, sizeof *p);
  p->on = on;
  p->start_ns = aa_now_ns();
  p->last_ns = p->start_ns;
}

/* "45 s", "3 min 20 s", "2 h 05 min" */
static void fmt_duration(char *buf, size_t cap, double secs) {
  unsigned long s = secs < 0 ? 0 : secs > 3.6e6 ? 3600000ul
                                                : (unsigned long)(secs + 0.5);
  if (s < 60)
    snprintf(buf, cap, "%lu s", s);
  else if (s < 3600)
    snprintf(buf, cap, "%lu min %02lu s", s / 60, s % 60);
  else
    snprintf(buf, cap, "%lu h %02lu min", s / 3600, s / 60 % 60);
}

void progress_update(tool_progress *p, uint64_t done, uint64_t total) {
  uint64_t now;
  double secs, rate;

  if (!p->on)
    return;
  now = aa_now_ns();
  /* the first call draws at once; then at most ten times a second */
  if (p->drawn && now - p->last_ns < 100000000ull && done != total)
    return;
  p->last_ns = now;
  secs = (double)(now - p->start_ns) / 1e9;
  rate = secs > 0 ? (double)p->events / secs / 1e6 : 0.0;
  if (total > 0) {
    int width = 30, fill = (int)((double)done / (double)total * width), i;
    char bar[32];
    if (fill > width)
      fill = width;
    for (i = 0; i < width; i++)
      bar[i] = i < fill ? '#' : '.';
    bar[width] = '\0';
    char left[32] = "?";
    /* time left: the rate so far over what remains (after 1% or 1 s) */
    if (done > 0 && done <= total && (secs >= 1.0 || done * 100 >= total))
      fmt_duration(left, sizeof left, secs * (double)(total - done) / (double)done);
    fprintf(stderr, "\r[%s] %5.1f%%  %llu events  %.1f M events/s  %s left ", bar,
            100.0 * (double)done / (double)total,
            (unsigned long long)p->events, rate, left);
  } else {
    fprintf(stderr, "\r%llu events  %.1f M events/s ",
            (unsigned long long)p->events, rate);
  }
  p->drawn = true;
}

void progress_end(tool_progress *p) {
  double secs;

  if (!p->on)
    return;
  secs = (double)(aa_now_ns() - p->start_ns) / 1e9;
  if (p->drawn)
    fprintf(stderr, "\r%-78s\r", "");
  fprintf(stderr, "%llu events in %.2f s (%.1f M events/s)\n",
          (unsigned long long)p->events, secs,
          secs > 0 ? (double)p->events / secs / 1e6 : 0.0);
  p->drawn = false;
  p->on = false;
}

void fmt_bytes(uint64_t v, char *buf, size_t cap) {
  static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double d = (double)v;
  int u = 0;

  while (d >= 1024.0 && u < 5) {
    d /= 1024.0;
    u++;
  }
  if (u == 0)
    snprintf(buf, cap, "%llu B", (unsigned long long)v);
  else
    snprintf(buf, cap, "%.2f %s", d, units[u]);
}

static void fmt_us(double us, char *buf, size_t cap) {
  if (us >= 1e6)
    snprintf(buf, cap, "%.3f s", us / 1e6);
  else if (us >= 1e3)
    snprintf(buf, cap, "%.3f ms", us / 1e3);
  else
    snprintf(buf, cap, "%.1f us", us);
}

/* "  requested 1.00 MiB (50.0 %)" parts of the account line */
static void acct_part(FILE *f, const char *sep, const char *name, uint64_t v, uint64_t whole) {
  char b[32];
  fmt_bytes(v, b, sizeof b);
  fprintf(f, "%s%s %s (%.1f %%)", sep, name, b,
          whole > 0 ? 100.0 * (double)v / (double)whole : 0.0);
}

static void print_account_text(FILE *f, const char *head, const aa_pool_account *a) {
  uint64_t w = a->bytes_reserved;
  acct_part(f, head, "requested", a->requested, w);
  acct_part(f, ", ", "rounding", a->rounding, w);
  acct_part(f, ", ", "slab free", a->slab_free, w);
  acct_part(f, ", ", "slab tails", a->slab_tails, w);
  acct_part(f, ", ", "holes", a->holes, w);
  acct_part(f, ", ", "stream holds", a->stream_holds, w);
  acct_part(f, ", ", "thread caches", a->thread_caches, w);
  acct_part(f, ", ", "other", a->other, w);
  fprintf(f, "\n");
}

/* The account at peak reserved of a loaded run into *out: false when there
 * is none (a model of PyTorch's allocator, nothing reserved). */
static bool account_at_peak(const loaded *l, aa_pool_account *out) {
  out->version = AA_ACCOUNT_VERSION;
  out->size = (uint32_t)sizeof *out;
  return !l->is_torch && l->sim != NULL && aa_replay_sim_account_at_peak(l->sim, out) == AA_OK;
}

/* {"bytes_reserved":...,"other":N (no closing brace) */
static void print_json_account_fields(FILE *f, const aa_pool_account *a) {
  fprintf(f,
          "{\"bytes_reserved\":%llu,\"requested\":%llu,"
          "\"rounding\":%llu,\"slab_free\":%llu,\"slab_tails\":%llu,\"holes\":%llu,"
          "\"stream_holds\":%llu,\"thread_caches\":%llu,\"other\":%llu",
          (unsigned long long)a->bytes_reserved, (unsigned long long)a->requested,
          (unsigned long long)a->rounding, (unsigned long long)a->slab_free,
          (unsigned long long)a->slab_tails, (unsigned long long)a->holes,
          (unsigned long long)a->stream_holds, (unsigned long long)a->thread_caches,
          (unsigned long long)a->other);
}

void print_json_account(FILE *f, const loaded *l) {
  aa_pool_account a;
  if (!account_at_peak(l, &a)) {
    fprintf(f, ",\"account_at_peak\":null");
  } else {
    fprintf(f, ",\"account_at_peak\":");
    print_json_account_fields(f, &a);
    fprintf(f, "}");
  }
  if (!l->have_acct_use) {
    fprintf(f, ",\"account_at_peak_in_use\":null");
    if (l->acct_use_why[0] != '\0') {
      fprintf(f, ",\"account_at_peak_in_use_why\":");
      print_json_string(f, l->acct_use_why);
    }
    return;
  }
  fprintf(f, ",\"account_at_peak_in_use\":");
  print_json_account_fields(f, &l->acct_use);
  fprintf(f, ",\"event\":%llu}", (unsigned long long)l->acct_use_event);
}

void print_result_text(FILE *f, const loaded *l) {
  const aa_replay_result *r = &l->res;
  const char *label = l->label;
  aa_pool_account acct;
  char a[32], b[32], c[32];

  fprintf(f, "policy            %s (%u classes at the end)\n", label,
          r->class_count);
  fprintf(f, "requests          %llu (allocs %llu, frees %llu, failures %llu; "
             "failed in the trace %llu)\n",
          (unsigned long long)r->requests, (unsigned long long)r->allocs,
          (unsigned long long)r->frees, (unsigned long long)r->failures,
          (unsigned long long)r->trace_failures);
  fprintf(f, "hit rate          %.2f %% (%llu hits, %llu misses)\n",
          100.0 * r->hit_rate, (unsigned long long)r->cache_hits,
          (unsigned long long)r->cache_misses);
  fprintf(f, "backend calls     %llu (%llu allocs, %llu frees, %llu failed)\n",
          (unsigned long long)r->backend_calls,
          (unsigned long long)r->backend_allocs,
          (unsigned long long)r->backend_frees,
          (unsigned long long)r->backend_failures);
  fmt_bytes(r->peak_in_use, a, sizeof a);
  fmt_bytes(r->peak_reserved, b, sizeof b);
  fmt_bytes(r->peak_requested, c, sizeof c);
  fprintf(f, "peak              in use %s, reserved %s, requested %s\n", a, b, c);
  if (account_at_peak(l, &acct))
    print_account_text(f, "at peak reserved  ", &acct);
  if (l->have_acct_use)
    print_account_text(f, "at peak in use    ", &l->acct_use);
  else if (l->acct_use_why[0] != '\0')
    fprintf(f, "at peak in use    %s\n", l->acct_use_why);
  fprintf(f, "internal frag     %.2f %% at peak in use, %.2f %% time-averaged\n",
          100.0 * r->int_frag_peak, 100.0 * r->int_frag_avg);
  fprintf(f, "external frag     %.2f %% at peak reserved, %.2f %% time-averaged\n",
          100.0 * r->ext_frag_peak, 100.0 * r->ext_frag_avg);
  fmt_us(r->sim_backend_us, a, sizeof a);
  fprintf(f, "sim backend time  %s\n", a);
  fmt_bytes(r->live_bytes_at_end, a, sizeof a);
  fprintf(f, "live at end       %llu blocks, %s requested\n",
          (unsigned long long)r->live_at_end, a);
  if (r->diag.malformed + r->diag.unknown_action + r->diag.unknown_free +
          r->diag.duplicate_ptr + r->diag.size_mismatch >
      0) {
    fprintf(f, "input problems    malformed %llu, unknown action %llu, unknown "
               "free %llu, duplicate pointer %llu, size mismatch %llu\n",
            (unsigned long long)r->diag.malformed,
            (unsigned long long)r->diag.unknown_action,
            (unsigned long long)r->diag.unknown_free,
            (unsigned long long)r->diag.duplicate_ptr,
            (unsigned long long)r->diag.size_mismatch);
    if (r->diag.first_error[0] != '\0')
      fprintf(f, "first problem     %s\n", r->diag.first_error);
  }
}

typedef enum cell { C_U64,
                    C_PCT,
                    C_BYTES,
                    C_US } cell;

static void put_cell(FILE *f, cell k, double v, int width) {
  char buf[40];

  switch (k) {
  case C_U64:
    snprintf(buf, sizeof buf, "%llu", (unsigned long long)v);
    break;
  case C_PCT:
    snprintf(buf, sizeof buf, "%.2f %%", 100.0 * v);
    break;
  case C_BYTES:
    fmt_bytes((uint64_t)v, buf, sizeof buf);
    break;
  case C_US:
    fmt_us(v, buf, sizeof buf);
    break;
  }
  fprintf(f, "  %*s", width, buf);
}

void print_compare_table(FILE *f, const char *const *labels,
                         const aa_replay_result *r, size_t n) {
  int width = 12;
  size_t i, row;
  static const struct {
    const char *name;
    cell kind;
  } rows[] = {
      {"requests", C_U64},
      {"failures", C_U64},
      {"hit rate", C_PCT},
      {"backend calls", C_U64},
      {"peak in use", C_BYTES},
      {"peak reserved", C_BYTES},
      {"peak requested", C_BYTES},
      {"int frag peak", C_PCT},
      {"int frag avg", C_PCT},
      {"ext frag peak", C_PCT},
      {"ext frag avg", C_PCT},
      {"sim backend", C_US},
      {"classes", C_U64},
  };

  for (i = 0; i < n; i++) {
    int l = (int)strlen(labels[i]);
    if (l > width)
      width = l;
  }
  fprintf(f, "%-16s", "");
  for (i = 0; i < n; i++)
    fprintf(f, "  %*s", width, labels[i]);
  fprintf(f, "\n");
  for (row = 0; row < sizeof rows / sizeof rows[0]; row++) {
    fprintf(f, "%-16s", rows[row].name);
    for (i = 0; i < n; i++) {
      const aa_replay_result *x = &r[i];
      double v = 0;
      switch (row) {
      case 0: v = (double)x->requests; break;
      case 1: v = (double)x->failures; break;
      case 2: v = x->hit_rate; break;
      case 3: v = (double)x->backend_calls; break;
      case 4: v = (double)x->peak_in_use; break;
      case 5: v = (double)x->peak_reserved; break;
      case 6: v = (double)x->peak_requested; break;
      case 7: v = x->int_frag_peak; break;
      case 8: v = x->int_frag_avg; break;
      case 9: v = x->ext_frag_peak; break;
      case 10: v = x->ext_frag_avg; break;
      case 11: v = x->sim_backend_us; break;
      default: v = (double)x->class_count; break;
      }
      put_cell(f, rows[row].kind, v, width);
    }
    fprintf(f, "\n");
  }
}

static void db_row(FILE *f, const char *label, const char *run,
                   const aa_replay_result *x, int width) {
  fprintf(f, "%-*s %6s", width, label, run);
  put_cell(f, C_U64, (double)x->events, 10);
  put_cell(f, C_U64, (double)x->requests, 10);
  put_cell(f, C_PCT, x->hit_rate, 8);
  put_cell(f, C_U64, (double)x->backend_calls, 8);
  put_cell(f, C_BYTES, (double)x->peak_in_use, 10);
  put_cell(f, C_BYTES, (double)x->peak_reserved, 10);
  put_cell(f, C_PCT, x->int_frag_peak, 8);
  put_cell(f, C_PCT, x->ext_frag_peak, 8);
  put_cell(f, C_US, x->sim_backend_us, 10);
  fprintf(f, "\n");
}

void print_db_table(FILE *f, const char *const *labels, const db_meta *meta,
                    const aa_replay_result *r, size_t n,
                    const aa_replay_result *combined) {
  int width = 8;
  size_t i;
  char run[24];

  for (i = 0; i < n; i++) {
    int l = (int)strlen(labels[i]);
    if (l > width)
      width = l;
  }
  fprintf(f, "%-*s %6s  %10s  %10s  %8s  %8s  %10s  %10s  %8s  %8s  %10s\n",
          width, "database", "run", "events", "requests", "hit", "backend",
          "peak used", "peak rsvd", "int frag", "ext frag", "sim time");
  for (i = 0; i < n; i++) {
    snprintf(run, sizeof run, "%lld", (long long)meta[i].run_id);
    db_row(f, labels[i], run, &r[i], width);
  }
  db_row(f, "combined", "", combined, width);
}

static void file_put(void *sink, const char *s, size_t n) { fwrite(s, 1, n, sink); }

void print_json_string(FILE *f, const char *s) { aa__json_put(file_put, f, s, strlen(s)); }

void print_json_result(FILE *f, const aa_replay_result *r) {
  char buf[4096];
  size_t len = aa_replay_result_json(r, buf, sizeof buf);

  if (len >= sizeof buf) {
    char *big = malloc(len + 1);
    if (big != NULL) {
      aa_replay_result_json(r, big, len + 1);
      fputs(big, f);
      free(big);
      return;
    }
  }
  fputs(buf, f);
}

void print_json_head(FILE *f, const options *o, const timing *t) {
  char desc[512];

  input_describe(&o->in, desc, sizeof desc);
  fprintf(f, "{\"command\":");
  print_json_string(f, o->cmd);
  fprintf(f, ",\"input\":");
  print_json_string(f, desc);
  fprintf(f, ",\"pool\":");
  print_json_string(f, o->pool);
  fprintf(f, ",\"events\":%llu,\"wall_s\":%.6f,\"events_per_s\":%.0f,"
             "\"cpu_s\":%.6f,\"events_per_cpu_s\":%.0f",
          (unsigned long long)t->events, t->wall_s, t->events_per_s, t->cpu_s,
          t->events_per_cpu_s);
}
