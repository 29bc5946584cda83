/*
 * workload.c — the demo's trainer-like workload: the model's long-lived
 * tensors and one training step's allocations and frees (workload.h).
 * Used by adaptalloc-demo (demo.c) and tests/test_adapt_demo.c.
 *
 * Entry points: demo_model_alloc, demo_train_step, demo_eval_step.
 */
#include <string.h>

#include "workload.h"

const int demo_seq_schedule[DEMO_PHASES] = {128, 256, 64, 192, 384};
const bool demo_phase_eval[DEMO_PHASES] = {false, true, false, false, false};

#define DEMO_MAX_SHAPES 9

uint64_t demo_rng_next(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

int demo_seq_len(int base, uint64_t *rng) {
  return base - 8 * (int)(demo_rng_next(rng) % 4); /* padding jitter */
}

typedef struct step_ctx {
  aa_pool *pool;
  uint64_t failed;
} step_ctx;

static demo_tensor t_alloc(step_ctx *c, size_t size) {
  demo_tensor t;
  t.size = size;
  t.ptr = aa_alloc(c->pool, size, NULL);
  if (t.ptr == NULL) {
    c->failed++;
  }
  return t;
}

static void t_free(step_ctx *c, demo_tensor *t) {
  if (t->ptr != NULL) {
    (void)aa_free(c->pool, t->ptr, t->size, NULL);
  }
  t->ptr = NULL;
  t->size = 0;
}

int demo_model_alloc(aa_pool *pool, demo_model *m) {
  const size_t h = DEMO_HIDDEN;
  size_t shapes[DEMO_MAX_SHAPES];
  int ns = 0;
  int l;
  int i;
  int k;

  memset(m, 0, sizeof *m);
  for (l = 0; l < DEMO_LAYERS; l++) {
    shapes[0] = 3 * h * h; /* W_qkv */
    shapes[1] = h * h;     /* W_o */
    shapes[2] = 4 * h * h; /* W_1 */
    shapes[3] = 4 * h * h; /* W_2 */
    shapes[4] = 2 * h;     /* ln1 gamma, beta */
    shapes[5] = 2 * h;     /* ln2 */
    shapes[6] = 3 * h + h; /* qkv and o biases */
    shapes[7] = 4 * h + h; /* mlp biases */
    ns = 8;
    for (i = 0; i < ns; i++) {
      /* the weight (fp16), its gradient (fp16), Adam m and v (fp32) */
      size_t sz[4] = {shapes[i] * DEMO_ELEM, shapes[i] * DEMO_ELEM, shapes[i] * 4, shapes[i] * 4};
      for (k = 0; k < 4; k++) {
        void *p = aa_alloc(pool, sz[k], NULL);
        if (p == NULL) {
          return AA_ENOMEM;
        }
        m->t[m->n].ptr = p;
        m->t[m->n].size = sz[k];
        m->n++;
        m->bytes += sz[k];
      }
    }
  }
  shapes[8] = (size_t)DEMO_VOCAB * h * DEMO_ELEM; /* embedding (tied output) */
  for (k = 0; k < 2; k++) {
    void *p = aa_alloc(pool, shapes[8], NULL);
    if (p == NULL) {
      return AA_ENOMEM;
    }
    m->t[m->n].ptr = p;
    m->t[m->n].size = shapes[8];
    m->n++;
    m->bytes += shapes[8];
  }
  return AA_OK;
}

void demo_model_free(aa_pool *pool, demo_model *m) {
  int i;
  for (i = m->n - 1; i >= 0; i--) {
    if (m->t[i].ptr != NULL) {
      (void)aa_free(pool, m->t[i].ptr, m->t[i].size, NULL);
    }
  }
  memset(m, 0, sizeof *m);
}

/* What a step keeps between the forward and the backward pass. */
typedef struct layer_saved {
  demo_tensor ln_out, ln_mean, ln_rstd, q, k, v, softmax, attn_out, mlp_hidden, mlp_act;
} layer_saved;

/* The forward pass at sequence length s: per layer, what the backward pass
 * needs goes into saved[], the temporaries are freed; *ids, *x and *logits
 * (a vocabulary shard's) stay live. */
static void forward(step_ctx *c, int s, layer_saved *saved, demo_tensor *ids, demo_tensor *x,
                    demo_tensor *logits) {
  const size_t b = DEMO_BATCH;
  const size_t h = DEMO_HIDDEN;
  const size_t tok = b * (size_t)s;
  const size_t act = tok * h * DEMO_ELEM;                                /* [B, S, H] fp16 */
  const size_t stat = tok * 4;                                           /* [B, S] fp32 */
  const size_t att = b * DEMO_HEADS * (size_t)s * (size_t)s * DEMO_ELEM; /* [B, h, S, S] */
  const size_t mlp = tok * 4 * h * DEMO_ELEM;                            /* [B, S, 4H] */
  int l;

  *ids = t_alloc(c, tok * 8); /* int64 token ids */
  *x = t_alloc(c, act);       /* embedding output */
  for (l = 0; l < DEMO_LAYERS; l++) {
    layer_saved *ls = &saved[l];
    demo_tensor scores;
    demo_tensor proj;
    demo_tensor mlp_out;
    ls->ln_out = t_alloc(c, act);
    ls->ln_mean = t_alloc(c, stat);
    ls->ln_rstd = t_alloc(c, stat);
    ls->q = t_alloc(c, act);
    ls->k = t_alloc(c, act);
    ls->v = t_alloc(c, act);
    scores = t_alloc(c, att);
    ls->softmax = t_alloc(c, att);
    t_free(c, &scores);
    ls->attn_out = t_alloc(c, act);
    proj = t_alloc(c, act);
    ls->mlp_hidden = t_alloc(c, mlp);
    ls->mlp_act = t_alloc(c, mlp);
    mlp_out = t_alloc(c, act);
    t_free(c, &proj);
    t_free(c, &mlp_out);
  }
  *logits = t_alloc(c, tok * 1024 * DEMO_ELEM); /* a vocabulary shard */
}

/* Frees what forward() saved for one layer (an evaluation step's end). */
static void free_saved(step_ctx *c, layer_saved *ls) {
  t_free(c, &ls->mlp_act);
  t_free(c, &ls->mlp_hidden);
  t_free(c, &ls->softmax);
  t_free(c, &ls->attn_out);
  t_free(c, &ls->v);
  t_free(c, &ls->k);
  t_free(c, &ls->q);
  t_free(c, &ls->ln_rstd);
  t_free(c, &ls->ln_mean);
  t_free(c, &ls->ln_out);
}

uint64_t demo_train_step(aa_pool *pool, int s, demo_compute_fn compute, void *user) {
  const size_t h = DEMO_HIDDEN;
  const size_t tok = DEMO_BATCH * (size_t)s;
  const size_t act = tok * h * DEMO_ELEM;
  const size_t att = DEMO_BATCH * DEMO_HEADS * (size_t)s * (size_t)s * DEMO_ELEM;
  const size_t mlp = tok * 4 * h * DEMO_ELEM;
  step_ctx c = {pool, 0};
  layer_saved saved[DEMO_LAYERS];
  demo_tensor ids;
  demo_tensor x;
  demo_tensor logits;
  demo_tensor loss;
  int l;

  forward(&c, s, saved, &ids, &x, &logits);
  loss = t_alloc(&c, 4);
  t_free(&c, &logits);
  /* the forward kernels ran meanwhile: this is where memory use peaks */
  if (compute != NULL) {
    compute(user, 0);
  }

  for (l = DEMO_LAYERS - 1; l >= 0; l--) {
    layer_saved *ls = &saved[l];
    demo_tensor d_mlp = t_alloc(&c, mlp);
    demo_tensor d_act = t_alloc(&c, act);
    demo_tensor d_scores;
    demo_tensor dq;
    demo_tensor dk;
    demo_tensor dv;
    t_free(&c, &ls->mlp_act);
    t_free(&c, &ls->mlp_hidden);
    t_free(&c, &d_mlp);
    d_scores = t_alloc(&c, att);
    t_free(&c, &ls->softmax);
    dq = t_alloc(&c, act);
    dk = t_alloc(&c, act);
    dv = t_alloc(&c, act);
    t_free(&c, &d_scores);
    t_free(&c, &ls->attn_out);
    t_free(&c, &ls->v);
    t_free(&c, &ls->k);
    t_free(&c, &ls->q);
    t_free(&c, &dv);
    t_free(&c, &dk);
    t_free(&c, &dq);
    t_free(&c, &ls->ln_rstd);
    t_free(&c, &ls->ln_mean);
    t_free(&c, &ls->ln_out);
    t_free(&c, &d_act);
  }
  t_free(&c, &loss);
  t_free(&c, &x);
  t_free(&c, &ids);
  if (compute != NULL) {
    compute(user, 1); /* backward, optimiser */
  }
  return c.failed;
}

uint64_t demo_eval_step(aa_pool *pool, int s, demo_eval *ev, demo_compute_fn compute, void *user) {
  step_ctx c = {pool, 0};
  layer_saved saved[DEMO_LAYERS];
  demo_tensor ids;
  demo_tensor x;
  demo_tensor logits;
  demo_tensor preds;
  int l;

  forward(&c, s, saved, &ids, &x, &logits);
  preds = t_alloc(&c, (size_t)DEMO_BATCH * DEMO_EVAL_CLASSES * DEMO_ELEM);
  t_free(&c, &logits);
  if (compute != NULL) {
    compute(user, 0); /* no backward pass: the forward's share only */
  }
  for (l = DEMO_LAYERS - 1; l >= 0; l--)
    free_saved(&c, &saved[l]);
  t_free(&c, &x);
  t_free(&c, &ids);
  if (preds.ptr != NULL && ev->n < DEMO_EVAL_KEEP)
    ev->kept[ev->n++] = preds;
  else
    t_free(&c, &preds);
  return c.failed;
}

void demo_eval_end(aa_pool *pool, demo_eval *ev) {
  step_ctx c = {pool, 0};
  for (int i = 0; i < ev->n; i++)
    t_free(&c, &ev->kept[i]);
  ev->n = 0;
}
