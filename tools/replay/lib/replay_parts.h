/*
 * replay_parts.h — the replay tool's own parts (tools/replay/lib/), built
 * into the tool (and linked explicitly by the tests and the fuzz target that
 * exercise them), never into libadaptalloc: the RMM-format CSV reader and
 * writer (replay_csv.c, replay_csv_line.c), the model of PyTorch's caching
 * allocator (replay_torch.c) and the suggest tuner (replay_suggest.c). They
 * sit on the library's replay API (adaptalloc/replay.h: events, sinks, the
 * simulator's results).
 */
#ifndef ADAPTALLOC_REPLAY_PARTS_H
#define ADAPTALLOC_REPLAY_PARTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "adaptalloc/replay.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------ CSV */

/* Reads an RMM logging_resource_adaptor CSV log (docs/replay.md "CSV"):
 * header `Thread,Time,Action,Pointer,Size,Stream` (optional; columns in any
 * order, unknown columns ignored), actions `allocate`, `deallocate`,
 * `allocate failure`. Accepts LF or CRLF, blank lines, `#` comment lines,
 * spaces around fields, and fields in double quotes without embedded quotes.
 * Numbers: decimal or 0x-hex. Time: seconds with a fraction (`1634567890.5`),
 * `HH:MM:SS.ffffff`, or an integer followed by `ns` / `us`.
 *
 * Events go to sink in batches. A bad line stops the parse with AA_EPARSE and
 * "line N: <what>" in err under AA_REPLAY_STOP; under AA_REPLAY_COUNT it is
 * counted in diag (may be NULL) and skipped. A sink's non-AA_OK return stops
 * the parse and is returned. progress (may be NULL) is called between
 * batches with bytes consumed so far and len. */
typedef void (*aa_replay_progress_fn)(void *user, uint64_t done, uint64_t total);

typedef struct aa_replay_csv_options {
  aa_replay_on_error on_error;
  aa_replay_progress_fn progress;
  void *progress_user;
} aa_replay_csv_options;

AA_EXTERN int aa_replay_csv_parse(const char *buf, size_t len,
                                  const aa_replay_csv_options *opt,
                                  aa_replay_sink sink, void *user,
                                  aa_replay_diag *diag, char *err,
                                  size_t errcap);

/* The same over a file (mapped, not copied; "-" reads standard input).
 * AA_EIO with the errno text when it cannot be read. */
AA_EXTERN int aa_replay_csv_parse_file(const char *path,
                                       const aa_replay_csv_options *opt,
                                       aa_replay_sink sink, void *user,
                                       aa_replay_diag *diag, char *err,
                                       size_t errcap);

/* Writes one event as a CSV line in the format above (no header), returns
 * the length like snprintf. A stream use ('u', from a store trace) writes
 * nothing and returns 0: RMM's format has no action for it. */
AA_EXTERN size_t aa_replay_csv_format(const aa_replay_event *ev, char *buf,
                                      size_t cap);
#define AA_REPLAY_CSV_HEADER "Thread,Time,Action,Pointer,Size,Stream"
/* The longest CSV line accepted (bytes, without its line end): a longer one
 * (a file with no newline, /dev/zero) is an error naming the line and the
 * bound, whatever --on-error says, and nothing more is read. */
#define AA_REPLAY_CSV_MAX_LINE 65536

/* ------------------------------------------------------------------ PyTorch */

/* A model of PyTorch's CUDA caching allocator, fed the same events as the
 * simulator and giving the same figures (aa_replay_result; class_count 0),
 * so that a trace can be compared with what PyTorch reserves for it. What
 * it models: docs/replay.md "PyTorch's allocator" and replay_torch.c. */
typedef enum aa_replay_torch_mode {
  AA_REPLAY_TORCH_DEFAULT = 1,   /* the caching allocator as shipped */
  AA_REPLAY_TORCH_EXPANDABLE = 2 /* expandable_segments:True */
} aa_replay_torch_mode;

typedef struct aa_replay_torch_config {
  aa_replay_torch_mode mode;
  uint64_t max_split_size; /* max_split_size_mb in bytes; 0 = unlimited */
  uint64_t capacity_bytes; /* simulated device memory, 0 = unbounded */
  bool ignore_streams;
  aa_replay_on_error on_error;
  const char *position_name; /* as in aa_replay_config */
  aa_replay_costs costs;     /* per cudaMalloc / cudaFree (expandable: per
                                page mapped / unmapped) */
} aa_replay_torch_config;

AA_EXTERN void aa_replay_torch_config_init(aa_replay_torch_config *cfg);

/* "torch:default", "torch:expandable", optionally followed by
 * ",max_split_mb=N": sets mode and max_split_size. AA_EINVAL (message in
 * err) for anything else. */
AA_EXTERN int aa_replay_torch_parse(const char *spec, aa_replay_torch_config *cfg,
                                    char *err, size_t errcap);

typedef struct aa_replay_torch aa_replay_torch;

AA_EXTERN int aa_replay_torch_new(const aa_replay_torch_config *cfg,
                                  aa_replay_torch **out, char *err, size_t errcap);
/* An aa_replay_sink, with the simulator's bad-input rules. */
AA_EXTERN int aa_replay_torch_feed(void *model, const aa_replay_event *ev, size_t n);
AA_EXTERN const char *aa_replay_torch_error(const aa_replay_torch *t);
AA_EXTERN void aa_replay_torch_result(aa_replay_torch *t, aa_replay_result *out);
/* The moment's figures, as aa_replay_sim_now. */
AA_EXTERN void aa_replay_torch_now(const aa_replay_torch *t, aa_replay_now *out);
AA_EXTERN void aa_replay_torch_free(aa_replay_torch *t);

/* ------------------------------------------------------------------ suggest */

typedef struct aa_replay_suggest_config {
  size_t max_classes;    /* table size bound (default AA_MAX_CLASSES) */
  size_t slab_size;      /* the pool's slab size (default 2 MiB) */
  size_t max_small;      /* the pool's largest class (default 1 MiB) */
  double min_gain_slabs; /* add an exact class only when it saves at least
                            this many slabs' worth of bytes at the size's peak
                            live count (default 0.5) */
} aa_replay_suggest_config;

AA_EXTERN void aa_replay_suggest_config_init(aa_replay_suggest_config *cfg);

/* Derives a class table from per-size figures of a run over `base` (the table
 * the run used, ascending, last = max_small): keeps the base ladder and adds
 * exact classes (size rounded up to 512) for the sizes whose rounding waste
 * at their peak live count is largest, best first, while the table stays
 * within max_classes and each addition saves at least min_gain_slabs slabs.
 * out gets the new table (cap entries at most; *nout the count). Returns
 * AA_OK, AA_EINVAL for bad arguments, AA_ERANGE when cap is too small. */
AA_EXTERN int aa_replay_suggest_classes(const aa_replay_size_stat *sizes,
                                        size_t nsizes,
                                        const aa_class_spec *base, size_t nbase,
                                        const aa_replay_suggest_config *cfg,
                                        aa_class_spec *out, size_t cap,
                                        size_t *nout);

#ifdef __cplusplus
}
#endif
#endif /* ADAPTALLOC_REPLAY_PARTS_H */
