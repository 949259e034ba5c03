/*
 * model/hfconfig.h - what the files reading a Hugging Face config.json share (hfconfig.c,
 * hfconfig_shape.c, hfconfig_count.c): the config being read and its key readers, the shape and
 * the parameter counts of each block family. The rest of model/ sees only model/model.h.
 */
#ifndef OOMLESS_MODEL_HFCONFIG_H
#define OOMLESS_MODEL_HFCONFIG_H

#include "model/model.h"

#include <json-c/json.h>

/* the config being read (a text_config inside a multimodal one) and its file, for messages */
typedef struct cfg_ctx {
    json_object *cfg;
    const char *path;
} cfg_ctx;

/* a NULL-terminated list of keys, the first present of which is read */
#define KEYS(...) ((const char *const[]){__VA_ARGS__, NULL})

/* hfconfig_shape.c: the first of `keys` present as a whole number in range (OOM_EPARSE when
 * not; absent: OOM_EPARSE when required, else dflt); a boolean; final_logit_softcapping; a
 * string (NULL when absent or not one); the head the architectures name; model_type
 * normalised; the widths, attention variants, windows and experts of m. */
int oomi_cfg_num(const cfg_ctx *c, const char *const *keys, long *out, bool required, long dflt);
bool oomi_cfg_bool(const cfg_ctx *c, const char *key, bool dflt);
bool oomi_cfg_softcap(const cfg_ctx *c, bool dflt);
const char *oomi_cfg_str(const cfg_ctx *c, const char *key);
oomi_head oomi_cfg_head(const cfg_ctx *c, oomi_block block);
const char *oomi_cfg_family(const cfg_ctx *c);
int oomi_cfg_shape(oomi_model *m, const cfg_ctx *c);

/* hfconfig_count.c: the parameters and linears of each block family, from m's shape; a
 * multimodal checkpoint's vision tower and projector (text: its text_config) */
int oomi_cfg_count_llama(oomi_model *m, const cfg_ctx *c);
int oomi_cfg_count_gpt(oomi_model *m, const cfg_ctx *c);
int oomi_cfg_count_bert(oomi_model *m, const cfg_ctx *c);
int oomi_cfg_count_t5(oomi_model *m, const cfg_ctx *c);
int oomi_cfg_count_vision(uint64_t *out, const cfg_ctx *c, json_object *text);

#endif
