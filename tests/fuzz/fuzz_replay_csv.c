/*
 * fuzz_replay_csv.c — libFuzzer target for the replay CSV reader (and, on
 * the same bytes, the histogram parser).
 *
 * Checks, beyond "no crash, no sanitizer report":
 *  - count mode never fails on bad lines, and whatever it accepts passes the
 *    rules of every reader (aa_replay_event_check: the same events from a
 *    store are refused or accepted alike) and replays through a simulator
 *    over the real core without error in count mode, unless the simulator's
 *    own fake address space runs out (then it stops, never counting that as
 *    the policy's failures);
 *  - every accepted event, written back with aa_replay_csv_format, parses
 *    again (stop mode) to the same fields: the fast path and the general
 *    path agree.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "adaptalloc/replay.h"
#include "replay_parts.h" /* tools/replay/lib: the tool's own parts */

#define MAX_EVENTS 4096

typedef struct vec {
  aa_replay_event ev[MAX_EVENTS];
  size_t n;
  aa_replay_sim *sim;
  bool stopped; /* the simulator's fake address space ran out */
} vec;

static int keep(void *user, const aa_replay_event *ev, size_t n) {
  vec *v = user;
  size_t i;

  for (i = 0; i < n; i++)
    if (aa_replay_event_check(&ev[i], NULL, 0) != AA_OK)
      abort(); /* an accepted line breaks the rules a store's row is held to */
  for (i = 0; i < n && v->n < MAX_EVENTS; i++)
    v->ev[v->n++] = ev[i];
  if (v->sim != NULL && !v->stopped) {
    int rc = aa_replay_sim_feed(v->sim, ev, n);
    /* count mode: bad events are counted, never an error; the simulator's
     * own limit stops it */
    if (rc == AA_ENOMEM && strstr(aa_replay_sim_error(v->sim), "fake address space") != NULL)
      v->stopped = true;
    else if (rc != AA_OK)
      abort();
  }
  return AA_OK;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static vec a, b;
  aa_replay_csv_options opt;
  aa_replay_config cfg;
  aa_replay_diag diag;
  aa_replay_hist h;
  aa_replay_result r;
  char err[AA_REPLAY_ERR_CAP];
  char *text;
  size_t len = 0, i;
  int rc;

  if (size > (1u << 16))
    return 0;
  memset(&opt, 0, sizeof opt);
  opt.on_error = AA_REPLAY_COUNT;
  a.n = 0;
  b.n = 0;
  aa_replay_config_init(&cfg);
  cfg.on_error = AA_REPLAY_COUNT;
  cfg.capacity_bytes = 64ull << 30;
  a.sim = NULL;
  a.stopped = false;
  if (aa_replay_sim_new(&cfg, &a.sim, err, sizeof err) != AA_OK)
    abort();
  memset(&diag, 0, sizeof diag);
  rc = aa_replay_csv_parse((const char *)data, size, &opt, keep, &a, &diag,
                           err, sizeof err);
  /* Only a broken header stops count mode. */
  if (rc != AA_OK && strstr(err, "header") == NULL)
    abort();
  aa_replay_sim_result(a.sim, &r);
  aa_replay_sim_free(a.sim);
  a.sim = NULL;

  /* Round trip what was accepted. */
  text = malloc(64 + a.n * 128);
  if (text == NULL)
    return 0;
  len = (size_t)sprintf(text, "%s\n", AA_REPLAY_CSV_HEADER);
  for (i = 0; i < a.n; i++)
    len += aa_replay_csv_format(&a.ev[i], text + len, 128);
  opt.on_error = AA_REPLAY_STOP;
  b.sim = NULL;
  if (aa_replay_csv_parse(text, len, &opt, keep, &b, NULL, err, sizeof err) !=
          AA_OK ||
      b.n != a.n)
    abort();
  for (i = 0; i < a.n; i++) {
    if (a.ev[i].op != b.ev[i].op || a.ev[i].time_ns != b.ev[i].time_ns ||
        a.ev[i].ptr != b.ev[i].ptr || a.ev[i].size != b.ev[i].size ||
        a.ev[i].stream != b.ev[i].stream || a.ev[i].thread != b.ev[i].thread)
      abort();
  }
  free(text);

  /* The histogram parser on the same bytes. */
  if (aa_replay_hist_parse((const char *)data, size, &h, err, sizeof err) ==
      AA_OK)
    aa_replay_hist_clear(&h);
  return 0;
}
