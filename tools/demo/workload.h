/*
 * workload.h — the demo's trainer-like workload (tools/demo/workload.c),
 * shared by adaptalloc-demo and the test that compares the policy loop on
 * and off on it (tests/test_adapt_demo.c).
 *
 * A small transformer trained on one pool: weights, gradients and two
 * optimiser states allocated once (demo_model_alloc), then steps
 * (demo_train_step) that allocate the forward pass's activations and free
 * them in the backward pass, sized by a sequence length. The memory handed
 * out is never touched (it may be device memory).
 */
#ifndef AA_DEMO_WORKLOAD_H
#define AA_DEMO_WORKLOAD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "adaptalloc/core.h"

#define DEMO_LAYERS 4
#define DEMO_HIDDEN 512
#define DEMO_HEADS 8
#define DEMO_BATCH 4
#define DEMO_VOCAB 8192
#define DEMO_ELEM 2 /* fp16 */

/* The sequence-length schedule: one phase after the other. */
extern const int demo_seq_schedule[5];
#define DEMO_PHASES 5
/* Which phases evaluate instead of training (demo_eval_step): the second
 * one, so a run's first phase change brings a request size the class ladder
 * serves with much waste and that many blocks hold at once. */
extern const bool demo_phase_eval[DEMO_PHASES];
/* An evaluation step keeps its predictions (DEMO_BATCH x DEMO_EVAL_CLASSES
 * fp16 scores, 10240 bytes: the default ladder's 16 KiB class wastes 37.5%
 * of each) until the phase ends, at most DEMO_EVAL_KEEP per worker. */
#define DEMO_EVAL_CLASSES 1280
#define DEMO_EVAL_KEEP 2048

/* One live tensor. */
typedef struct demo_tensor {
  void *ptr;
  size_t size;
} demo_tensor;

/* Long-lived tensors: per layer W_qkv, W_o, W_1, W_2, two layer-norm
 * parameter pairs, biases; the embedding. Each with a gradient and two
 * optimiser states (Adam m and v, fp32). */
typedef struct demo_model {
  demo_tensor t[DEMO_LAYERS * 8 * 4 + 4];
  int n;
  size_t bytes;
} demo_model;

/* Called by demo_train_step after the forward pass (phase 0, where memory
 * use peaks) and after the backward pass (phase 1): the stand-in for the
 * kernels. May be NULL. */
typedef void (*demo_compute_fn)(void *user, int phase);

/* A splitmix64 step: the workload's jitter. */
uint64_t demo_rng_next(uint64_t *state);

/* The step's sequence length in a phase of `base` tokens: base minus 0, 8,
 * 16 or 24 tokens of padding jitter, drawn from *rng. */
int demo_seq_len(int base, uint64_t *rng);

/* Allocates the model from pool into *m. AA_ENOMEM when an allocation fails;
 * *m then holds what was allocated: free it with demo_model_free either way. */
int demo_model_alloc(aa_pool *pool, demo_model *m);

/* Frees what demo_model_alloc allocated, newest first; *m is cleared. */
void demo_model_free(aa_pool *pool, demo_model *m);

/* One training step at sequence length s on pool; every block it allocates
 * is freed before it returns. Returns the number of allocations that
 * failed (the step goes on without them). */
uint64_t demo_train_step(aa_pool *pool, int s, demo_compute_fn compute, void *user);

/* What an evaluation phase keeps: each step's predictions. Zero it before
 * the first step (= {0}); demo_eval_end frees what it holds. */
typedef struct demo_eval {
  demo_tensor kept[DEMO_EVAL_KEEP];
  int n;
} demo_eval;

/* One evaluation step at sequence length s: the forward pass (its
 * activations freed at the end of the step), then the step's predictions
 * allocated and kept in *ev (while it has room) for the phase's metrics.
 * Returns the number of allocations that failed. */
uint64_t demo_eval_step(aa_pool *pool, int s, demo_eval *ev, demo_compute_fn compute, void *user);

/* The end of an evaluation phase: frees the kept predictions, oldest first;
 * ev->n becomes 0. */
void demo_eval_end(aa_pool *pool, demo_eval *ev);

#endif
