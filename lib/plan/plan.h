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

/* Throughput model constants (docs/plan.md, "Objective"). */
#define OOMI_PLAN_MFU_MAX        0.5   /* model-FLOPs utilisation of a large micro-batch */
#define OOMI_PLAN_RIDGE_DEFAULT  200.0 /* FLOP per byte when the profile lacks bandwidth/TFLOP/s */
#define OOMI_PLAN_TFLOPS_DEFAULT 100.0
#define OOMI_PLAN_LINK_INTRA     100e9 /* bytes/s between GPUs of one node (NVLink-class, busbw) */
#define OOMI_PLAN_LINK_INTER     25e9  /* bytes/s between nodes (200 Gb/s InfiniBand) */
#define OOMI_PLAN_PCIE           25e9  /* bytes/s host <-> device (PCIe 4.0 x16, effective) */
#define OOMI_PLAN_CPU_ADAM       1e9 /* parameters/s a CPU Adam step updates (DeepSpeed CPUAdam) */
/* Fills c's throughput fields from its knobs and estimate. */
void oomi_plan_throughput(oom_plan_choice *c, const oom_plan_request *r, long nodes);
/* The peak TFLOP/s the profile gives for a precision (0 TFLOP/s bf16 falls back to fp16). */
double oomi_plan_tflops(const oom_gpu_profile *gpu, oom_precision p);
/* Fills res->suggestions for a plan where nothing fits (w: a scratch clone; NULL for lines). */
int oomi_plan_suggest(oom_plan_result *res, const oom_plan_request *r, oom_workload *w,
                      const oom_knobs *smallest);
/* Appends a notice to res->notices: OOM_OK or OOM_ENOMEM (recorded). */
int oomi_plan_note(oom_plan_result *res, const char *fmt, ...) OOMI_PRINTF(2, 3);
/* a size as text, in a caller's 16-byte buffer */
#define OOMI_SZ(buf, b) oom_format_size((buf), sizeof(buf), (b))
/* Resolves options for a given GPU id (NULL: the options' own) and plans (plan_options.c). */
int oomi_plan_options_run_gpu(oom_plan_result **out, const oom_plan_options *o, const char *gpu);
/* the human report of a plan (plan_text.c) */
int oomi_plan_text(char **out, const oom_plan_result *r);

#endif
