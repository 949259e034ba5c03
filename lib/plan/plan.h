/*
 * plan/plan.h - what the planner's files share (plan*.c, svg.c, table.c). Uses estimate, model,
 * calib, gpu, core.
 */
#ifndef OOMLESS_PLAN_PLAN_H
#define OOMLESS_PLAN_PLAN_H

#include "calib/calib.h"
#include "core/core.h"
#include "estimate/estimate.h"
#include "gpu/gpu.h"
#include "model/model.h"

/* Fills c's throughput fields from its knobs and estimate, with the planner constants k
 * (docs/plan.md, "Objective"; gpu/consts.c). */
void oomi_plan_throughput(oom_plan_choice *c, const oom_plan_request *r, long nodes,
                          const struct oomi_plan_consts *k);
/* The peak TFLOP/s the profile gives for a precision (0 TFLOP/s bf16 falls back to fp16; a
 * profile without figures gets k's default). */
double oomi_plan_tflops(const oom_gpu_profile *gpu, oom_precision p,
                        const struct oomi_plan_consts *k);
/* oom_plan_run with the planner constants k (NULL: the defaults); confidence > 0: plan to the
 * device peak's bound at that confidence within the target instead of the margin. */
int oomi_plan_run(oom_plan_result **out, const oom_plan_request *r,
                  const struct oomi_plan_consts *k, double confidence);
/* Fills res->suggestions for a plan where nothing fits (w: a scratch clone; NULL for lines). */
int oomi_plan_suggest(oom_plan_result *res, const oom_plan_request *r, oom_workload *w,
                      const oom_knobs *smallest);
/* Appends a notice to res->notices: OOM_OK or OOM_ENOMEM (recorded). */
int oomi_plan_note(oom_plan_result *res, const char *fmt, ...) OOMI_PRINTF(2, 3);
/* A measured line planned without a sequence length (no --seq, none in its record): its seq_len
 * is 1 inside the search and "not known" in the outputs. */
#define OOMI_PLAN_SEQ_KNOWN(res, c)                                                                \
    (!(res)->measured || (res)->requested_seq > 0 || (c)->knobs.seq_len > 1)
/* a size as text, in a caller's 16-byte buffer */
#define OOMI_SZ(buf, b) oom_format_size((buf), sizeof(buf), (b))
/* Resolves options for a given GPU id (NULL: the options' own) and plans (plan_options.c). */
int oomi_plan_options_run_gpu(oom_plan_result **out, const oom_plan_options *o, const char *gpu);
/* The safety margin the user asked for, per job (with fit-confidence, budget holds the one the
 * bound needs instead) (plan_text.c) */
uint64_t oomi_plan_user_margin(const oom_plan_result *r);
/* the human report of a plan (plan_text.c) */
int oomi_plan_text(char **out, const oom_plan_result *r);

/* vLLM's KV-cache arithmetic for an inference plan (plan_serve.c) */
typedef struct oomi_plan_vllm_kv {
    long tp, batched_tokens, seqs, blocks, tokens;
    double utilisation;
    uint64_t requested, weights, activation, non_torch, available, block_bytes;
} oomi_plan_vllm_kv;
int oomi_plan_vllm(oomi_plan_vllm_kv *out, const oom_plan_result *r);
json_object *oomi_plan_vllm_json(const oom_plan_result *r);
/* the blocks vLLM finds for the plan hold one sequence of `seq` tokens (cdiv(seq, block size)
 * blocks: vLLM's max_memory_usage_bytes for full attention) */
bool oomi_plan_vllm_holds(const oom_plan_result *r, long seq);
#define OOMI_PLAN_FORMATS "text, json, env, args, deepspeed, torchrun, vllm, accelerate, torchtitan"
bool oomi_plan_format_known(const char *format);
/* "vllm", "accelerate", "torchtitan" into sb */
int oomi_plan_format_serve(oomi_sb *sb, const oom_plan_result *r, const char *format);
/* the precision is 16-bit brain float (bf, also for quantised bases) or half (plan_serve.c) */
bool oomi_is16(oom_precision p, bool bf);

#endif
