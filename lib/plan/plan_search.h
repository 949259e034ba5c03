/*
 * plan/plan_search.h - what the files of the planner's search share (plan_run.c, plan_search.c,
 * plan_space.c, plan_result.c, plan_notes.c, plan_suggest.c): the state of one search and the
 * steps each file takes of it. The rest of plan/ sees only plan/plan.h.
 */
#ifndef OOMLESS_PLAN_PLAN_SEARCH_H
#define OOMLESS_PLAN_PLAN_SEARCH_H

#include "plan/plan.h"

#define MAX_FAMILIES 1024
#define MAX_MICRO    4096
#define MAX_SEQS     24

/* the knobs other than micro-batch, accumulation and seq: one "family" of configurations */
typedef struct family {
    oom_precision prec;
    oom_optimizer opt;
    oom_checkpointing ck;
    oom_sharding shard;
    oom_offload off;
    oom_loss loss;
    oom_attention attn;
    size_t var; /* under full checkpointing: which variant (search.vars) */
} family;

typedef struct search {
    const oom_plan_request *r;
    const struct oomi_plan_consts *k; /* the throughput model's constants */
    oom_workload *w;                  /* scratch clone; NULL for a measured line */
    oom_knobs base;
    long gpus, nodes, eff;
    uint64_t usable;
    double conf;     /* fit-confidence: a candidate fits when its bound at conf is within target */
    uint64_t target; /* per job */
    family fams[MAX_FAMILIES];
    size_t nfam;
    long micro[MAX_MICRO], accum[MAX_MICRO];
    size_t nmicro;
    long seqs[MAX_SEQS];
    size_t nseq;
    oom_plan_choice *all; /* per family: its best fit and the next larger micro-batch */
    size_t nall, cap;
    oom_plan_choice best, smallest, fixed_smallest; /* fixed_: before any downscaling */
    bool have_best, have_smallest;
    long candidates;
    oomi_rollout_engine ro;          /* GRPO's colocated vLLM engine (ro.on) */
    oomi_ckvar vars[OOMI_CKVAR_MAX]; /* variants of full checkpointing tried (plan_ckpt.c) */
    size_t nvar, own;                /* own: the workload's (0: plain full) */
} search;

/* plan_search.c: the search itself. Estimates one configuration (*valid false when the
 * estimator refuses the combination); a better than b; every family at every sequence length
 * under the OOM_DOWNSCALE_* bits `relax`; the confidence class of knobs k at `level`. */
int oomi_search_eval(search *s, const oom_knobs *k, size_t var, oom_plan_choice *c, bool *valid);
bool oomi_search_better(const search *s, const oom_plan_choice *a, const oom_plan_choice *b);
int oomi_search_all(search *s, unsigned relax);
int oomi_search_conf_class(const search *s, const oom_knobs *k, double level, oomi_conf *out);

/* plan_space.c: the candidates. The families of knobs (relax_ck: checkpointing may be raised);
 * the micro-batches with their accumulation (below: those under the fixed batch); the sequence
 * lengths; whether ZeRO-3 layouts are left out for a model too deep to replay. */
void oomi_search_families(search *s, bool relax_ck);
int oomi_search_micro(search *s, bool below);
void oomi_search_seqs(search *s, bool relax_seq);
bool oomi_search_zero3_too_deep(const search *s);

/* plan_result.c: the result of a search that found a plan, and its identity (model, GPU); why
 * c does not fit beside the colocated engine (into c->why). */
int oomi_search_found(search *s, oom_plan_result *res);
int oomi_search_identity(const search *s, oom_plan_result *res);
int oomi_search_why_engine(search *s, oom_plan_choice *c);

/* plan_notes.c: what the result says beside the plan. */
int oomi_search_batch_hint(search *s, char **out);
int oomi_search_awkward(search *s, oom_plan_result *res);
int oomi_search_serve_profile(const search *s, oom_plan_result *res);
int oomi_search_nccl_note(search *s, oom_plan_result *res);
int oomi_search_conf_budget(search *s, oom_plan_result *res, const oom_knobs *k);
int oomi_search_confidence(search *s, oom_plan_result *res);
int oomi_search_objective_note(search *s, oom_plan_result *res);
int oomi_search_rollout_note(search *s, oom_plan_result *res);

/* plan_suggest.c: nothing fits under the request (the search under `relax` found nothing):
 * the suggestions and OOM_ENOFIT with its message. */
int oomi_search_no_fit(search *s, oom_plan_result *res, unsigned relax);

#endif
