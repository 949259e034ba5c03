/*
 * apply/apply.h - config-file editing: a byte-offset tree of YAML/JSON, typed values, key paths,
 * renderers, value specs and presets, one edit in one text. Uses core.
 */
#ifndef OOMLESS_APPLY_APPLY_H
#define OOMLESS_APPLY_APPLY_H

#include "core/core.h"

#include <string.h>
#include <sys/stat.h>

/* ==== apply (apply_run.c, apply_value.c, apply_yaml.c, apply_json.c) ======
 * A config file is parsed into a small tree of oomi_node with byte
 * offsets into the original buffer; edits are splices of those byte spans. */

/* a typed scalar value; `s` is owned (STRING only) */
typedef enum oomi_avtype {
    OOMI_AV_NULL,
    OOMI_AV_BOOL,
    OOMI_AV_INT,
    OOMI_AV_FLOAT,
    OOMI_AV_STRING,
} oomi_avtype;

typedef struct oomi_aval {
    oomi_avtype type;
    bool b;
    long long i;
    double d;
    char *s;
} oomi_aval;

void oomi_aval_clear(oomi_aval *v);
int oomi_aval_copy(oomi_aval *dst, const oomi_aval *src);
bool oomi_aval_equal(const oomi_aval *a, const oomi_aval *b);
const char *oomi_avtype_name(oomi_avtype t);
/* resolves a plain YAML scalar as OmegaConf/PyYAML do (null, bool incl. yes/no/on/off, int, float)
 */
int oomi_aval_from_plain(oomi_aval *out, const char *text);
/* the value as JSON text ("8", "true", "\"bf16\"") appended to sb */
void oomi_aval_json(oomi_sb *sb, const oomi_aval *v);
/* the shortest text of a double that reads back exactly and looks like a float ("2.0", "1e-05") */
void oomi_format_float(char *buf, size_t size, double d);

typedef enum oomi_nkind { OOMI_N_SCALAR, OOMI_N_MAP, OOMI_N_SEQ, OOMI_N_ALIAS } oomi_nkind;
typedef enum oomi_quote { OOMI_Q_PLAIN, OOMI_Q_SINGLE, OOMI_Q_DOUBLE, OOMI_Q_BLOCK } oomi_quote;

/* A node of the tree. Only what the edits need is built: the nodes on the wanted key paths (with
 * their values), and in their maps the keys that match the next segment of a path or are merge
 * keys (<<). Every other entry is only counted and measured (count, first_*, last_*, step). */
typedef struct oomi_node {
    oomi_nkind kind;
    oomi_quote quote;  /* scalars */
    bool flow;         /* flow collection ({...}, [...]; every JSON collection) */
    bool anchored;     /* has an anchor (&a): aliases elsewhere share it */
    bool tagged;       /* has an explicit tag (!!str, !custom) */
    oomi_aval val;     /* scalars: the typed value */
    size_t start, end; /* byte span (scalars include their quotes) */
    size_t close;      /* flow collections: offset of the closing bracket */
    size_t index;      /* position in its parent collection */
    size_t count;      /* collections: entries in the file (n of them are kept below) */
    /* collections with entries: the spans of the first and the last ones (prev_val_end: the
     * value before the last, when count >= 2; keys: maps only) */
    size_t first_key_start, first_key_end, first_val_start;
    size_t last_key_start, last_val_end, prev_val_end;
    size_t step; /* YAML block maps: indentation of the first nested block map past this map's
                  * own (its indentation step); 0 when there is none */
    size_t n, cap;
    struct oomi_node **keys; /* maps: the kept key nodes (NULL for sequences) */
    struct oomi_node **vals; /* maps: their values; sequences: the kept items */
} oomi_node;

void oomi_node_free(oomi_node *node);
/* frees what a node not on the heap holds (children, value), leaving it to be filled again */
void oomi_node_clear(oomi_node *node);
/* a heap copy of *node, which is zeroed; NULL (and *node cleared) when out of memory */
oomi_node *oomi_node_move(oomi_node *node);
/* what one entry (key NULL for sequences) adds to what is known of its collection: the first and
 * last key and value offsets and the count, kept whether or not the entry itself is */
void oomi_node_measure(oomi_node *n, const oomi_node *key, const oomi_node *val);
/* appends a child (key NULL for sequences); takes ownership of both, also on failure */
int oomi_node_add(oomi_node *parent, oomi_node *key, oomi_node *val);
/* the kept item of a sequence at `index`, or NULL */
const oomi_node *oomi_node_item(const oomi_node *seq, size_t index);
/* whether a key node spells `key` (a string key by its value, another scalar by its text) */
bool oomi_key_is(const oomi_node *k, const char *buf, const char *key);

/* key paths: "a.b[0].c" */
typedef struct oomi_pathseg {
    char *key; /* NULL for an index */
    size_t index;
} oomi_pathseg;

int oomi_path_parse(oomi_pathseg **out, size_t *count, const char *path);
void oomi_path_free(oomi_pathseg *segs, size_t count);

/* The key paths a parse builds the tree for. */
typedef struct oomi_want {
    const oomi_pathseg *segs;
    size_t n;
} oomi_want;

/* Of the paths act[0..nact) (indexes into want) that lead to a node at `depth`, writes to out
 * those that go on through its child with key `key` (maps) or at `index` (sequences, key NULL);
 * returns how many. out has room for nact. */
size_t oomi_want_child(const oomi_want *want, const size_t *act, size_t nact, size_t depth,
                       const oomi_node *key, const char *buf, size_t index, size_t *out);

/* Parsers: OOM_EPARSE naming `file` with line and column. The tree holds what the key paths
 * want[0..nwant) need. `document`: 0 for a file that must hold one document (OOM_EREFUSED for a
 * YAML stream of several), N for the N-th (1-based; OOM_EREFUSED when there are fewer). */
int oomi_yaml_parse(oomi_node **root, const char *buf, size_t len, const char *file,
                    const oomi_want *want, size_t nwant, size_t document);
int oomi_json_parse(oomi_node **root, const char *buf, size_t len, const char *file,
                    const oomi_want *want, size_t nwant, size_t document);

/* Text of a new scalar in the old node's style; NULL on allocation failure. */
char *oomi_yaml_render(const oomi_node *old, const char *buf, const oomi_aval *v);
char *oomi_json_render(const oomi_aval *v);
/* Whether a file is edited as JSON: its name ends in .json, or (not .yaml/.yml) its text starts
 * with '{' or '['. */
bool oomi_json_looks(const char *name, const char *text);
/* Text that creates segs[0..n) under `map` (a missing key chain ending in v), inserted at *pos.
 * OOM_EREFUSED when the chain cannot be created (an index, a non-map parent). */
int oomi_yaml_create(char **text, size_t *pos, const oomi_node *map, const char *buf, size_t len,
                     const oomi_pathseg *segs, size_t n, const char *v_text);
int oomi_json_create(char **text, size_t *pos, const oomi_node *map, const char *buf, size_t len,
                     const oomi_pathseg *segs, size_t n, const char *v_text);

/* Value specs and presets (apply_spec.c). */
struct json_object;
/* OOM_EINVAL naming the spec when it is malformed */
int oomi_spec_check(const char *spec);
/* *missing (and OOM_OK) when the plan lacks the field; OOM_EINVAL when a plan is needed and
 * `plan` is NULL, or the field is not a scalar */
int oomi_spec_resolve(oomi_aval *out, bool *missing, struct json_object *plan, const char *spec);
/* `unset`: the preset's "unset:" entry of the key (what the framework uses without it), or NULL */
typedef int (*oomi_preset_fn)(const char *key, const char *spec, const char *unset, void *user);
/* calls fn for each assignment of the named preset (user file first, then the data file) */
int oomi_preset_each(const char *name, oomi_preset_fn fn, void *user);

/* Comments beside a value (apply_comment.c): calls fn with the line (1-based) and the value of
 * each whole number (digits not joined to a letter, digit, '_' or a decimal point: not the 16 of
 * bf16, the 2 or 5 of 2.5) in the YAML comment after the value at text[start..end) on its line,
 * then in a comment line just above that line. Stops at the first error fn returns. */
typedef int (*oomi_number_fn)(size_t line, long long number, void *user);
int oomi_comment_numbers(const char *text, size_t len, size_t start, size_t end, oomi_number_fn fn,
                         void *user);

/* The assignments of one text (apply_edit.c). */
typedef struct oomi_edit_result {
    const char *action; /* "set", "create", "unchanged", "skipped" */
    oomi_aval old;      /* valid for set/unchanged */
    bool has_old;
    char *reason;  /* skipped: why (allocated) */
    bool inserted; /* the text was inserted (create, or a value after "key:") */
    bool has_span; /* found: start..end is the old value's byte span in the text edited */
    size_t start, end;
    bool instead; /* skipped: another key of its group is set or created instead */
} oomi_edit_result;

typedef struct oomi_edit {
    const char *key;       /* the key path */
    const oomi_aval *v;    /* the new value */
    bool optional;         /* a preset's: skipped where it does not fit */
    oomi_edit_result *res; /* what was done (zeroed first) */
    unsigned group;        /* alternatives: of a group (>0) only the first key the text has is
                            * set, else only the first is created (OOM_APPLY_CREATE) */
} oomi_edit;

/* how to read a text: JSON or YAML, its name in messages, the YAML document (see the parsers) */
typedef struct oomi_doc {
    bool json;
    const char *file;
    size_t document;
} oomi_doc;

/* Makes edits[0..n) on in[0..in_len) (flags OOM_APPLY_CREATE, OOM_APPLY_FORCE_TYPE), then reads
 * every edited value back; *out gets the new text (allocated), NULL when no byte changed. Each
 * new value replaces an old one on one parse of the text; each created key is added on a parse
 * of its own (a created key may be the parent of the next); one more parse checks them all:
 * OOM_EREFUSED when inserted text does not read back (an unusual spot: explicit '?' keys, ...),
 * OOM_EINTERNAL when a replaced value does not (a bug). Stops at the first refusal. */
int oomi_edit_all(const char *in, size_t in_len, char **out, size_t *out_len, const oomi_doc *doc,
                  oomi_edit *edits, size_t n, unsigned flags);

/* ==== the run (apply_run.c: edits in memory and checks; apply_files.c: reading, locking and
 * writing the files; apply_report.c: the report; apply_guard.c reads what it edited and may
 * edit a file again) ====== */

struct assign {
    char *key, *spec;
    bool optional;
    unsigned group; /* a preset's alternatives (KEY1|KEY2: the first the file has is set, else the
                     * first is created): the same number; 0 for none */
    char *unset;    /* a preset's: what the framework uses where a file lacks the key (a YAML
                     * scalar); NULL when not known */
};

struct edit {
    char *key;
    oomi_edit_result res;
    oomi_aval val; /* the new value (not for skipped-for-the-plan edits) */
    bool has_val;
};

struct note {
    size_t line; /* 1-based; 0: the whole file */
    char *msg;
};

struct file {
    char *name, *real;
    char *old, *text;    /* text: the edited text, NULL while it is the old one */
    char *tmp;           /* the replacement, written and synced, not yet renamed */
    char *backup, *btmp; /* the backup's name, and its staged temporary file */
    size_t oldlen, len;
    int fd;         /* the file, open (and locked when writing) since it was read; -1 */
    struct stat st; /* what it was then */
    bool json;
    struct edit *edits;
    size_t nedits;
    struct note *notes; /* said in the report: stale comments, a partial write */
    size_t nnotes;
};

struct oom_apply {
    struct json_object *plan;
    struct assign *as;
    size_t nas;
    char *suffix;
    size_t document;
    long lock_ms;
    oom_apply_step_fn hook;
    void *user;
    struct file *files;
    size_t nfiles;
    bool ran, dry, written;
    unsigned groups; /* the alternatives' groups numbered so far */
};

/* The plan fields that make up the effective batch: micro-batch x accumulation x GPUs, or the
 * global batch (DeepSpeed's train_batch_size), which fixes it by itself. */
enum role { R_MICRO, R_ACCUM, R_GLOBAL, NROLES };

/* what a file says of one role */
struct factor {
    const char *key;       /* the first of its keys the file has, else the first assigned one */
    bool assigned;         /* an assignment of the role has a value from the plan */
    bool present;          /* the file has one of its keys (set, unchanged, created, "auto") */
    bool created;          /* ... only because it was created */
    bool has_old, has_new; /* int values: the old one in that file, the one it has now */
    long long old, nw;
    bool has_plan; /* the plan's value (int) */
    long long plan;
};

struct batch {
    struct factor f[NROLES];
    long long gpus, plan_eff; /* the plan's (plan_eff 0: unknown) */
    bool has_old, has_new;    /* the effective batch the file gave and gives */
    long long old, nw;
};

/* a preset's entry (apply_run.c): "K1|K2" is a group of alternatives (the first the file has is
 * set, else the first is created); `unset` what the framework uses where a file lacks the key */
int oomi_apply_preset_entry(const char *key, const char *spec, const char *unset, void *user);

/* apply_batch.c: the role of a value spec in the effective batch (R_MICRO ...), -1 for none;
 * *n: the plan's int field (or `dflt` when it has none of that type); a factor of the effective
 * batch, when it is a sensible one (a product cannot overflow); what one file says of the
 * effective batch, old and new; a note of the file's report (line 0: the whole file), which takes
 * msg (NULL: out of memory) */
int oomi_apply_role(const char *spec);
int oomi_apply_plan_int(struct json_object *plan, const char *field, long long dflt, long long *n);
bool oomi_apply_factor_ok(long long n);
int oomi_apply_batch(const oom_apply *a, const struct file *f, struct batch *b);
int oomi_apply_note(struct file *f, size_t line, char *msg);

/* What apply checks before it writes (apply_guard.c). The effective batch a file states is kept
 * against a plan made for another: *kept (to put in json_object_put) is the plan with the
 * accumulation that keeps it, for the file to be edited again, and *note (owned) what to say
 * then; where it cannot be kept the edit is refused, unless OOM_APPLY_ALLOW_BATCH_CHANGE, and
 * the change is noted. A skipped key the plan's memory needs (its checkpointing, offload,
 * sharding), where the framework's default for the missing key (the preset's unset:) is not the
 * plan's, is refused unless OOM_APPLY_ALLOW_SKIPPED (then noted). */
int oomi_apply_keep_batch(const oom_apply *a, struct file *f, unsigned flags,
                          struct json_object **kept, char **note);
int oomi_apply_memory_keys(oom_apply *a, unsigned flags);

/* the text a file has now: its edited one, else the one read */
static inline const char *oomi_apply_text(const struct file *f)
{
    return f->text ? f->text : f->old;
}

/* whether a file's text is not the one read */
static inline bool oomi_apply_changed(const struct file *f)
{
    return f->len != f->oldlen || memcmp(oomi_apply_text(f), f->old, f->len);
}

/* apply_files.c: the files named, opened (locked unless a dry run), and read, in the order of
 * their device and inode numbers; the replacements and backups staged, checked unchanged and
 * renamed into place; temporary files removed and locks released */
int oomi_apply_read_files(oom_apply *a, const char *const *files, size_t count, unsigned flags);
int oomi_apply_write_files(oom_apply *a);
void oomi_apply_finish_files(oom_apply *a);

#endif
