/*
 * replay_report.c — the replay figures as JSON (aa_replay_result_json).
 * Field names are the struct's; docs/replay.md "Output fields" defines them.
 */
#include <string.h>

#include "replay_internal.h"
#include "adaptalloc/internal/util.h"

typedef struct jbuf {
  char *buf;
  size_t cap, len;
} jbuf;

static void jputf(jbuf *j, const char *fmt, ...) AA__PRINTF(2, 3);

static void jputf(jbuf *j, const char *fmt, ...) {
  va_list ap;
  int n;
  char *dst = j->len < j->cap ? j->buf + j->len : NULL;
  size_t room = j->len < j->cap ? j->cap - j->len : 0;

  va_start(ap, fmt);
  n = vsnprintf(dst, room, fmt, ap);
  va_end(ap);
  if (n > 0)
    j->len += (size_t)n;
}

static void jput(void *sink, const char *s, size_t n) {
  jputf(sink, "%.*s", (int)n, s);
}

static void jstr(jbuf *j, const char *s) { aa__json_put(jput, j, s, strlen(s)); }

static double finite_or_zero(double v) { return v == v && v < 1e300 && v > -1e300 ? v : 0.0; }

size_t aa_replay_result_json(const aa_replay_result *r, char *buf, size_t cap) {
  jbuf j = {buf, cap, 0};

  if (buf != NULL && cap > 0)
    buf[0] = '\0';
#define U(name) jputf(&j, "\"" #name "\":%llu,", (unsigned long long)r->name)
#define D(name) jputf(&j, "\"" #name "\":%.6f,", finite_or_zero(r->name))
  jputf(&j, "{");
  U(events);
  U(requests);
  U(allocs);
  U(frees);
  U(failures);
  U(trace_failures);
  U(cache_hits);
  U(cache_misses);
  D(hit_rate);
  U(backend_allocs);
  U(backend_frees);
  U(backend_calls);
  U(backend_failures);
  U(event_records);
  U(peak_requested);
  U(peak_in_use);
  U(peak_reserved);
  U(requested_at_peak_in_use);
  U(in_use_at_peak_reserved);
  D(int_frag_peak);
  D(int_frag_avg);
  D(ext_frag_peak);
  D(ext_frag_avg);
  D(sim_backend_us);
  U(live_at_end);
  U(live_bytes_at_end);
  U(trace_span_ns);
  U(class_count);
  U(stitches);
  U(stitch_hits);
  U(stitch_dissolved);
  U(alias_maps);
  U(alias_unmaps);
  U(stitch_wakes);
  U(plan_hits);
  U(plan_misses);
  U(plans_adopted);
  U(plans_dropped);
  U(plans_refused);
  U(plan_bytes);
  U(stream_waits);
  U(stitch_deferred);
  U(alias_ns);
  jputf(&j, "\"adapt\":{\"steps\":%llu,\"decisions\":%llu,\"classes_added\":"
            "%llu,\"classes_retired\":%llu,\"grows\":%llu,\"trims\":%llu,"
            "\"bytes_trimmed\":%llu,\"apply_failures\":%llu,\"rejected\":%llu},",
        (unsigned long long)r->adapt.steps,
        (unsigned long long)r->adapt.decisions,
        (unsigned long long)r->adapt.classes_added,
        (unsigned long long)r->adapt.classes_retired,
        (unsigned long long)r->adapt.grows, (unsigned long long)r->adapt.trims,
        (unsigned long long)r->adapt.bytes_trimmed,
        (unsigned long long)r->adapt.apply_failures,
        (unsigned long long)r->adapt.rejected);
#undef U
#undef D
  jputf(&j, "\"input_errors\":{\"malformed\":%llu,\"unknown_action\":%llu,"
            "\"unknown_free\":%llu,\"duplicate_ptr\":%llu,\"size_mismatch\":%llu,"
            "\"first_line\":%llu,\"first_error\":",
        (unsigned long long)r->diag.malformed,
        (unsigned long long)r->diag.unknown_action,
        (unsigned long long)r->diag.unknown_free,
        (unsigned long long)r->diag.duplicate_ptr,
        (unsigned long long)r->diag.size_mismatch,
        (unsigned long long)r->diag.first_line);
  jstr(&j, r->diag.first_error);
  jputf(&j, "}}");
  return j.len;
}
