/* apply.c - the edit set behind `oomless apply`: assignments, one run over several files
 * (all edited in memory, then all written or none), and the report of what was done.
 *
 * A run that writes holds an exclusive lock on each file from before reading it until its
 * replacement is in place (filelock.c), so two runs on one file follow each other; just before
 * the first rename every file is checked to be the one that was read (programs that do not
 * lock). Backups are staged like the files: the new backup is written beside the old one under a
 * temporary name and only renamed into place once its file has been replaced. */
#include "apply/apply.h"

#include <errno.h>
#include <fcntl.h>
#include <json-c/json.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#define DEFAULT_LOCK_MS 10000

struct assign {
    char *key, *spec;
    bool optional;
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
};

int oom_apply_create(oom_apply **out)
{
    oom_apply *a = oomi_calloc(1, sizeof(*a));

    *out = NULL;
    if (!a || !(a->suffix = oomi_strdup(".bak"))) {
        oomi_free(a);
        return oomi_nomem();
    }
    a->lock_ms = DEFAULT_LOCK_MS;
    *out = a;
    return OOM_OK;
}

static const char *text_of(const struct file *f)
{
    return f->text ? f->text : f->old;
}

static void free_files(oom_apply *a)
{
    size_t i, j;

    for (i = 0; i < a->nfiles; i++) {
        struct file *f = &a->files[i];
        for (j = 0; j < f->nedits; j++) {
            oomi_free(f->edits[j].key);
            oomi_aval_clear(&f->edits[j].res.old);
            oomi_free(f->edits[j].res.reason);
            oomi_aval_clear(&f->edits[j].val);
        }
        if (f->tmp)
            unlink(f->tmp);
        if (f->btmp)
            unlink(f->btmp);
        if (f->fd >= 0)
            close(f->fd);
        for (j = 0; j < f->nnotes; j++)
            oomi_free(f->notes[j].msg);
        oomi_free(f->notes);
        oomi_free(f->edits);
        oomi_free(f->name);
        oomi_free(f->real);
        oomi_free(f->old);
        oomi_free(f->text);
        oomi_free(f->tmp);
        oomi_free(f->backup);
        oomi_free(f->btmp);
    }
    oomi_free(a->files);
    a->files = NULL;
    a->nfiles = 0;
    a->ran = a->dry = a->written = false;
}

void oom_apply_free(oom_apply *a)
{
    size_t i;

    if (!a)
        return;
    free_files(a);
    for (i = 0; i < a->nas; i++) {
        oomi_free(a->as[i].key);
        oomi_free(a->as[i].spec);
    }
    oomi_free(a->as);
    oomi_free(a->suffix);
    if (a->plan)
        json_object_put(a->plan);
    oomi_free(a);
}

int oom_apply_load_plan(oom_apply *a, const char *text, const char *name)
{
    struct json_object *doc;
    char *label;
    int err;

    if (!(label = oomi_asprintf("plan '%s'", name)))
        return oomi_nomem();
    err = oomi_json_load(&doc, text, strlen(text), label);
    oomi_free(label);
    if (err)
        return err;
    if (!json_object_is_type(doc, json_type_object)) {
        json_object_put(doc);
        return oomi_fail(OOM_EINVAL, "plan '%s' is not a JSON object", name);
    }
    if (a->plan)
        json_object_put(a->plan);
    a->plan = doc;
    return OOM_OK;
}

int oom_apply_set(oom_apply *a, const char *key, const char *spec, unsigned flags)
{
    oomi_pathseg *segs;
    size_t n, i;
    struct assign *grown, as = {NULL, NULL, (flags & OOM_APPLY_OPTIONAL) != 0};
    int err;

    if ((err = oomi_path_parse(&segs, &n, key)))
        return err;
    oomi_path_free(segs, n);
    if ((err = oomi_spec_check(spec)))
        return err;
    if (!(as.key = oomi_strdup(key)) || !(as.spec = oomi_strdup(spec))) {
        oomi_free(as.key);
        return oomi_nomem();
    }
    for (i = 0; i < a->nas && strcmp(a->as[i].key, key); i++)
        ;
    if (i < a->nas && as.optional && !a->as[i].optional) {
        oomi_free(as.key);
        oomi_free(as.spec);
        return OOM_OK;
    }
    if (i == a->nas) {
        if (!(grown = oomi_reallocarray(a->as, a->nas + 1, sizeof(*grown)))) {
            oomi_free(as.key);
            oomi_free(as.spec);
            return oomi_nomem();
        }
        a->as = grown;
        a->nas++;
    } else {
        oomi_free(a->as[i].key);
        oomi_free(a->as[i].spec);
    }
    a->as[i] = as;
    return OOM_OK;
}

static int add_preset_entry(const char *key, const char *spec, void *user)
{
    return oom_apply_set(user, key, spec, OOM_APPLY_OPTIONAL);
}

int oom_apply_preset(oom_apply *a, const char *name)
{
    return oomi_preset_each(name, add_preset_entry, a);
}

int oom_apply_set_backup_suffix(oom_apply *a, const char *suffix)
{
    char *s = NULL;

    if (suffix) {
        if (!*suffix)
            return oomi_fail(OOM_EINVAL, "backup suffix '' is empty: the backup would be the "
                                         "file itself (write no backup with --no-backup)");
        if (strchr(suffix, '/'))
            return oomi_fail(OOM_EINVAL, "backup suffix '%s' contains '/'", suffix);
        if (!(s = oomi_strdup(suffix)))
            return oomi_nomem();
    }
    oomi_free(a->suffix);
    a->suffix = s;
    return OOM_OK;
}

int oom_apply_set_document(oom_apply *a, size_t document)
{
    a->document = document;
    return OOM_OK;
}

int oom_apply_set_lock_timeout(oom_apply *a, double seconds)
{
    if (!(seconds >= 0 && seconds <= 86400))
        return oomi_fail(OOM_EINVAL, "lock timeout %g s is not between 0 and 86400 seconds",
                         seconds);
    a->lock_ms = (long)ceil(seconds * 1000);
    return OOM_OK;
}

void oom_apply_set_step_hook(oom_apply *a, oom_apply_step_fn fn, void *user)
{
    a->hook = fn;
    a->user = user;
}

/* ---- editing in memory --------------------------------------------------------------------- */

/* the value of every assignment, then every edit on the text and a read-back of each */
static int edit_file(oom_apply *a, struct file *f, unsigned flags)
{
    oomi_edit *wanted;
    oomi_doc doc = {false, f->name, a->document};
    size_t i, n = 0;
    int err = OOM_OK;
    bool missing;

    f->json = doc.json = oomi_json_looks(f->name, f->old);
    f->len = f->oldlen;
    if (!(f->edits = oomi_calloc(a->nas ? a->nas : 1, sizeof(*f->edits))))
        return oomi_nomem();
    for (i = 0; i < a->nas; i++) {
        struct edit *e = &f->edits[f->nedits++];
        if (!(e->key = oomi_strdup(a->as[i].key)))
            return oomi_nomem();
        if ((err = oomi_spec_resolve(&e->val, &missing, a->plan, a->as[i].spec)))
            return err;
        if (missing && a->as[i].optional) {
            e->res.action = "skipped";
            e->res.reason = oomi_asprintf("the plan has no '%s'", a->as[i].spec);
            if (!e->res.reason)
                return oomi_nomem();
            continue;
        }
        if (missing)
            return oomi_fail(OOM_ENOTFOUND, "the plan has no field '%s' (for key '%s')",
                             a->as[i].spec, a->as[i].key);
        e->has_val = true;
    }
    if (!(wanted = oomi_calloc(a->nas ? a->nas : 1, sizeof(*wanted))))
        return oomi_nomem();
    for (i = 0; i < f->nedits; i++)
        if (f->edits[i].has_val)
            wanted[n++] =
                (oomi_edit){f->edits[i].key, &f->edits[i].val, a->as[i].optional, &f->edits[i].res};
    err = oomi_edit_all(f->old, f->oldlen, &f->text, &f->len, &doc, wanted, n, flags);
    oomi_free(wanted);
    return err;
}

/* ---- the effective batch --------------------------------------------------------------------- */

/* The plan fields that make up the effective batch: micro-batch x accumulation x GPUs, or the
 * global batch (DeepSpeed's train_batch_size), which fixes it by itself. */
enum role { R_MICRO, R_ACCUM, R_GLOBAL, NROLES };

static int role_of(const char *spec)
{
    if (!strncmp(spec, "plan.", 5))
        spec += 5;
    if (!strcmp(spec, "batch_size"))
        return R_MICRO;
    if (!strcmp(spec, "grad_accum"))
        return R_ACCUM;
    if (!strcmp(spec, "global_batch") || !strcmp(spec, "effective_batch"))
        return R_GLOBAL;
    return -1;
}

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

static void note_factor(struct factor *fc, const char *key, const struct edit *e)
{
    bool skipped = !strcmp(e->res.action, "skipped");

    if (!fc->assigned) {
        fc->key = key;
        fc->has_plan = e->val.type == OOMI_AV_INT;
        fc->plan = e->val.i;
    }
    fc->assigned = true;
    if ((skipped && !e->res.has_old) || fc->present) /* the file lacks it, or known already */
        return;
    fc->present = true;
    fc->key = key;
    fc->created = !strcmp(e->res.action, "create");
    fc->has_old = e->res.has_old && e->res.old.type == OOMI_AV_INT;
    fc->old = e->res.old.i;
    fc->has_new = !skipped && e->val.type == OOMI_AV_INT;
    fc->nw = e->val.i;
}

/* *n: the plan's int field (or `dflt`) */
static int plan_int(struct json_object *plan, const char *field, long long dflt, long long *n)
{
    oomi_aval v = {0};
    bool missing = true;
    int err = plan ? oomi_spec_resolve(&v, &missing, plan, field) : OOM_OK;

    *n = !err && !missing && v.type == OOMI_AV_INT ? v.i : dflt;
    oomi_aval_clear(&v);
    return err == OOM_ENOMEM ? err : OOM_OK; /* a field of another type: the default */
}

/* a factor of the effective batch, when it is a sensible one (a product cannot overflow) */
static bool factor_ok(long long n)
{
    return n > 0 && n <= 1000000;
}

/* the effective batch from the factors: old (the file before) or new (after) */
static bool effective(const struct batch *b, bool old, long long *out)
{
    const struct factor *m = &b->f[R_MICRO], *g = &b->f[R_GLOBAL], *ac = &b->f[R_ACCUM];
    long long micro = old ? m->old : m->nw;
    long long accum = 1; /* an accumulation a config does not set is 1: the default of
                          * Lightning's accumulate_grad_batches and of HF's and DeepSpeed's
                          * gradient_accumulation_steps (their documentation) */

    if (g->present) {
        *out = old ? g->old : g->nw;
        return old ? g->has_old : g->has_new;
    }
    if (!m->present || !(old ? m->has_old : m->has_new) || !factor_ok(micro))
        return false;
    if (ac->present && !(old && ac->created)) {
        accum = old ? ac->old : ac->nw;
        if (!(old ? ac->has_old : ac->has_new) || !factor_ok(accum))
            return false;
    }
    if (!factor_ok(b->gpus))
        return false;
    *out = micro * accum * b->gpus;
    return true;
}

/* what one file says of the effective batch */
static int gather_batch(const oom_apply *a, const struct file *f, struct batch *b)
{
    size_t i;
    int r, err;

    memset(b, 0, sizeof(*b));
    for (i = 0; i < a->nas && i < f->nedits; i++)
        if ((r = role_of(a->as[i].spec)) >= 0 && f->edits[i].has_val && f->edits[i].res.action)
            note_factor(&b->f[r], a->as[i].key, &f->edits[i]);
    if ((err = plan_int(a->plan, "gpus", 1, &b->gpus)) ||
        (err = plan_int(a->plan, "global_batch", 0, &b->plan_eff)))
        return err;
    b->has_old = effective(b, true, &b->old);
    b->has_new = effective(b, false, &b->nw);
    return OOM_OK;
}

static int add_note(struct file *f, size_t line, char *msg)
{
    struct note *grown;
    size_t i;

    if (!msg)
        return oomi_nomem();
    for (i = 0; i < f->nnotes; i++)
        if (f->notes[i].line == line && !strcmp(f->notes[i].msg, msg)) {
            oomi_free(msg);
            return OOM_OK;
        }
    if (!(grown = oomi_reallocarray(f->notes, f->nnotes + 1, sizeof(*grown)))) {
        oomi_free(msg);
        return oomi_nomem();
    }
    f->notes = grown;
    f->notes[f->nnotes++] = (struct note){line, msg};
    return OOM_OK;
}

/* "45", or "B x 5" when the micro-batch is not known (the factor the file does not set) */
static void eff_text(char *buf, size_t size, const struct batch *b, bool known, long long n,
                     bool old)
{
    const struct factor *ac = &b->f[R_ACCUM];
    long long accum = old ? ac->old : ac->nw;

    if (known)
        oomi_snprintf(buf, size, "%lld", n);
    else if (!b->f[R_MICRO].present && (old ? ac->has_old : ac->has_new) && factor_ok(accum) &&
             factor_ok(b->gpus))
        oomi_snprintf(buf, size, "B x %lld", accum * b->gpus);
    else
        oomi_snprintf(buf, size, "an unknown number");
}

/* Assignments that set some of the effective batch's factors where the files lack another one
 * it needs: writing the others changes the effective batch, which is refused unless
 * OOM_APPLY_PARTIAL (then a note says how it changes). OOM_APPLY_CREATE creates keys, so a key
 * is only missing with it where it cannot be created. */
static int check_batch(struct file *f, const struct batch *b, unsigned flags)
{
    const struct factor *m = &b->f[R_MICRO], *ac = &b->f[R_ACCUM], *gap, *have;
    char from[48], to[48], want[48] = "", why[160] = "", change[128];
    bool same = b->has_old && b->has_new && b->old == b->nw,
         partial = (flags & OOM_APPLY_PARTIAL) != 0;

    if (!(m->present || ac->present) || b->f[R_GLOBAL].present || (m->present && ac->present))
        return OOM_OK;
    gap = m->present ? ac : m;
    have = m->present ? m : ac;
    if (!gap->assigned) /* the assignments leave that factor alone: the user's choice */
        return OOM_OK;
    eff_text(from, sizeof(from), b, b->has_old, b->old, true);
    eff_text(to, sizeof(to), b, b->has_new, b->nw, false);
    if (gap->has_plan)
        oomi_snprintf(want, sizeof(want), " %lld", gap->plan);
    oomi_snprintf(why, sizeof(why), "%s",
                  gap == m ? "B: the micro-batch the job uses"
                           : "an accumulation the file does not set is 1");
    if (b->plan_eff > 0)
        oomi_snprintf(why + strlen(why), sizeof(why) - strlen(why),
                      "; the plan's effective batch is %lld", b->plan_eff);
    /* same: the plan's micro-batch is the file's, but the effective batch is not the plan's */
    if (same)
        oomi_snprintf(change, sizeof(change), "%s %s",
                      partial ? "the effective batch stays" : "leave the effective batch at", from);
    else
        oomi_snprintf(change, sizeof(change), "%s from %s to %s",
                      partial ? "the effective batch changes" : "change the effective batch", from,
                      to);
    if (!partial)
        return oomi_fail(OOM_EREFUSED,
                         "'%s' has '%s' but not '%s' (%s%s in the plan): writing only the %s "
                         "would silently %s (%s); --create adds '%s', --partial writes the rest "
                         "anyway; no file is changed",
                         f->name, have->key, gap->key, gap == m ? "batch_size" : "grad_accum", want,
                         have == m ? "micro-batch" : "accumulation", change, why, gap->key);
    return add_note(f, 0, oomi_asprintf("no '%s' (--partial): %s (%s)", gap->key, change, why));
}

/* what a comment beside one changed value is checked against */
struct stale {
    struct file *f;
    const struct batch *b;
    const struct edit *e;
};

static int stale_number(size_t line, long long n, void *user)
{
    const struct stale *s = user;
    const struct batch *b = s->b;
    const oomi_aval *old = &s->e->res.old;

    if (b->has_old && b->has_new && b->old != b->nw && n == b->old)
        return add_note(s->f, line,
                        oomi_asprintf("comment mentions effective batch %lld; the new effective "
                                      "batch is %lld",
                                      n, b->nw));
    if (old->type == OOMI_AV_INT && n == old->i && s->e->val.type == OOMI_AV_INT)
        return add_note(s->f, line,
                        oomi_asprintf("comment mentions %lld, the old value of '%s'; the new "
                                      "value is %lld",
                                      n, s->e->key, s->e->val.i));
    return OOM_OK;
}

/* comments beside each changed YAML value that name its old value or the old effective batch */
static int find_stale(struct file *f, const struct batch *b)
{
    size_t j;
    int err;

    for (j = 0; !f->json && j < f->nedits; j++) {
        struct stale s = {f, b, &f->edits[j]};
        if (!f->edits[j].res.action || strcmp(f->edits[j].res.action, "set") ||
            !f->edits[j].res.has_span)
            continue;
        if ((err = oomi_comment_numbers(f->old, f->oldlen, f->edits[j].res.start,
                                        f->edits[j].res.end, stale_number, &s)))
            return err;
    }
    return OOM_OK;
}

/* every file's effective batch checked (a refusal leaves every file alone), then the notes */
static int check_edits(oom_apply *a, unsigned flags)
{
    struct batch *b = oomi_calloc(a->nfiles ? a->nfiles : 1, sizeof(*b));
    size_t i;
    int err = OOM_OK;

    if (!b)
        return oomi_nomem();
    for (i = 0; !err && i < a->nfiles; i++)
        err = gather_batch(a, &a->files[i], &b[i]);
    for (i = 0; !err && i < a->nfiles; i++)
        err = check_batch(&a->files[i], &b[i], flags);
    for (i = 0; !err && i < a->nfiles; i++)
        err = find_stale(&a->files[i], &b[i]);
    oomi_free(b);
    return err;
}

/* no two names of one file in a run: each would be edited from the old text (and locked
 * twice, waiting for itself). f->st gets what stat() says of the file (when it can). */
static int check_distinct(const oom_apply *a, struct file *f)
{
    size_t i;

    if (stat(f->real, &f->st) < 0)
        return OOM_OK; /* the open that follows says why */
    for (i = 0; i < a->nfiles && &a->files[i] != f; i++)
        if (a->files[i].st.st_dev == f->st.st_dev && a->files[i].st.st_ino == f->st.st_ino)
            return oomi_fail(OOM_EINVAL, "'%s' and '%s' are the same file; name it once",
                             a->files[i].name, f->name);
    return OOM_OK;
}

static int name_file(oom_apply *a, struct file *f, const char *name, unsigned flags)
{
    int err;

    f->fd = -1;
    if (!(f->name = oomi_strdup(name)))
        return oomi_nomem();
    if ((err = oomi_resolve_target(&f->real, name, (flags & OOM_APPLY_FOLLOW_SYMLINKS) != 0)))
        return err;
    return check_distinct(a, f);
}

/* opened (locked unless a dry run: that writes nothing and waits for nobody) and read */
static int read_file(oom_apply *a, struct file *f, unsigned flags)
{
    bool dry = (flags & OOM_APPLY_DRY_RUN) != 0;
    int err;

    if ((err = oomi_open_locked(&f->fd, &f->st, f->real, dry ? -1 : a->lock_ms)))
        return err;
    if (!dry && a->hook)
        a->hook("locked", f->name, a->user);
    if (!dry && f->st.st_nlink > 1)
        return oomi_fail(OOM_EREFUSED,
                         "'%s' has %lu hard links: a new file renamed over this name would "
                         "leave the other names with the old text; edit it by hand, or give it "
                         "a copy of its own first; the file is unchanged",
                         f->name, (unsigned long)f->st.st_nlink);
    /* write-protected: no write bit at all (root may write anything), or none for us */
    if (!dry && !(flags & OOM_APPLY_FORCE) &&
        (!(f->st.st_mode & 0222) ||
         (faccessat(AT_FDCWD, f->real, W_OK, AT_EACCESS) && errno == EACCES)))
        return oomi_fail(OOM_EREFUSED,
                         "'%s' is write-protected (mode %04o): not replacing it; make it "
                         "writable, or give --force (the new file keeps the mode); the file is "
                         "unchanged",
                         f->name, (unsigned)(f->st.st_mode & 07777));
    return oomi_read_fd(&f->old, &f->oldlen, f->fd, f->real, OOMI_READ_MAX);
}

/* Files are locked in the order of their device and inode numbers, whatever the order on the
 * command line: two runs locking a.yaml b.yaml and b.yaml a.yaml cannot wait for each other. */
static bool before(const struct stat *a, const struct stat *b)
{
    return a->st_dev != b->st_dev ? a->st_dev < b->st_dev : a->st_ino < b->st_ino;
}

static int read_files(oom_apply *a, const char *const *files, size_t count, unsigned flags)
{
    size_t i, *order = oomi_calloc(count, sizeof(*order));
    int err = OOM_OK;

    if (!order)
        return oomi_nomem();
    for (i = 0; !err && i < count; i++) {
        a->nfiles++;
        err = name_file(a, &a->files[i], files[i], flags);
        order[i] = i;
    }
    for (i = 1; !err && i < count; i++) { /* insertion sort: a handful of files */
        size_t j, k = order[i];
        for (j = i; j > 0 && before(&a->files[k].st, &a->files[order[j - 1]].st); j--)
            order[j] = order[j - 1];
        order[j] = k;
    }
    for (i = 0; !err && i < count; i++)
        err = read_file(a, &a->files[order[i]], flags);
    oomi_free(order);
    return err;
}

static bool changed(const struct file *f)
{
    return f->len != f->oldlen || memcmp(text_of(f), f->old, f->len);
}

/* ---- writing ------------------------------------------------------------------------------- */

/* FILE + suffix, unless that is a directory or another file of this run */
static int backup_name(oom_apply *a, struct file *f)
{
    struct stat st;
    size_t i;

    if (!(f->backup = oomi_asprintf("%s%s", f->real, a->suffix)))
        return oomi_nomem();
    if (lstat(f->backup, &st) < 0)
        return OOM_OK;
    if (S_ISDIR(st.st_mode))
        return oomi_fail(OOM_EIO,
                         "cannot write the backup of '%s': '%s' is a directory; the "
                         "file is unchanged",
                         f->name, f->backup);
    for (i = 0; i < a->nfiles; i++)
        if (a->files[i].st.st_dev == st.st_dev && a->files[i].st.st_ino == st.st_ino)
            return oomi_fail(OOM_EINVAL,
                             "the backup of '%s' would replace '%s', which this run edits too "
                             "(choose another --backup-suffix)",
                             f->name, a->files[i].name);
    return OOM_OK;
}

/* the replacements, then the new backups, written and synced under temporary names (the
 * replacements first: a file that cannot be replaced is named as such in the message) */
static int stage(oom_apply *a)
{
    size_t i;
    int err;

    for (i = 0; a->hook && i < a->nfiles; i++)
        if (changed(&a->files[i]))
            a->hook("prepared", a->files[i].name, a->user);
    for (i = 0; i < a->nfiles; i++) {
        struct file *f = &a->files[i];
        if (changed(f) &&
            (err = oomi_write_temp(&f->tmp, f->real, f->fd, text_of(f), f->len, a->hook, a->user)))
            return err; /* finish_files() unlinks the ones already made */
    }
    for (i = 0; i < a->nfiles; i++) {
        struct file *f = &a->files[i];
        if (!changed(f) || !a->suffix)
            continue;
        if ((err = backup_name(a, f)))
            return err;
        if ((err = oomi_write_temp(&f->btmp, f->backup, f->fd, f->old, f->oldlen, NULL, NULL)))
            return oomi_fail_prefix(err, "backup '%s': ", f->backup);
        if (a->hook)
            a->hook("backup-written", f->name, a->user);
    }
    return OOM_OK;
}

/* the renames: the file (it is new from here on), then its backup. Nothing is allocated here. */
static int commit(oom_apply *a, struct file *f)
{
    int err;

    if ((err = oomi_rename_temp(f->tmp, f->real, a->hook, a->user)))
        return err;
    oomi_free(f->tmp);
    f->tmp = NULL;
    a->written = true;
    if (f->btmp) {
        if (rename(f->btmp, f->backup) < 0) {
            err = oomi_fail(OOM_EIO,
                            "'%s' was written, but its backup could not be renamed into place "
                            "(%s): the old text is in '%s'",
                            f->name, strerror(errno), f->btmp);
            oomi_free(f->btmp); /* kept on disk: it holds the only copy of the old text */
            f->btmp = NULL;
            return err;
        }
        oomi_free(f->btmp);
        f->btmp = NULL;
        if (a->hook)
            a->hook("backup-renamed", f->name, a->user);
    }
    if ((err = oomi_sync_dir(f->real)))
        return err;
    if (a->hook)
        a->hook("dir-synced", f->name, a->user);
    return OOM_OK;
}

static int write_files(oom_apply *a)
{
    size_t i;
    int err;

    if ((err = stage(a)))
        return err;
    /* nobody wrote the files since they were read (programs that do not lock) */
    for (i = 0; i < a->nfiles; i++)
        if (a->files[i].tmp &&
            (err = oomi_check_unchanged(a->files[i].fd, &a->files[i].st, a->files[i].real)))
            return err;
    for (i = 0; i < a->nfiles; i++)
        if (a->files[i].tmp && (err = commit(a, &a->files[i])))
            return err;
    return OOM_OK;
}

/* temporary files removed, locks released */
static void finish_files(oom_apply *a)
{
    size_t i;

    for (i = 0; i < a->nfiles; i++) {
        struct file *f = &a->files[i];
        if (f->tmp)
            unlink(f->tmp);
        if (f->btmp)
            unlink(f->btmp);
        oomi_free(f->tmp);
        oomi_free(f->btmp);
        f->tmp = f->btmp = NULL;
        if (f->fd >= 0)
            close(f->fd);
        f->fd = -1;
    }
}

static int make_diff(oom_apply *a, char **diff)
{
    oomi_sb sb = OOMI_SB_INIT;
    size_t i;
    int err = OOM_OK;

    oomi_sb_puts(&sb, "");
    for (i = 0; !err && i < a->nfiles; i++)
        err = oomi_diff(&sb, a->files[i].name, a->files[i].old, a->files[i].oldlen,
                        text_of(&a->files[i]), a->files[i].len);
    if (err) {
        oomi_sb_free(&sb);
        return err;
    }
    return oomi_sb_finish(&sb, diff);
}

int oom_apply_run(oom_apply *a, const char *const *files, size_t count, unsigned flags, char **diff)
{
    size_t i;
    int err = OOM_OK;

    if (diff)
        *diff = NULL;
    free_files(a);
    if (!count)
        return oomi_fail(OOM_EINVAL, "no file to edit");
    if (!a->nas)
        return oomi_fail(OOM_EINVAL, "nothing to set (give --set or --preset)");
    if (!(a->files = oomi_calloc(count, sizeof(*a->files))))
        return oomi_nomem();
    err = read_files(a, files, count, flags);
    for (i = 0; !err && i < count; i++)
        err = edit_file(a, &a->files[i], flags);
    if (!err)
        err = check_edits(a, flags);
    if (!err && diff)
        err = make_diff(a, diff);
    a->dry = (flags & OOM_APPLY_DRY_RUN) != 0;
    if (!err && !a->dry)
        err = write_files(a);
    finish_files(a);
    if (err && diff) {
        oomi_free(*diff);
        *diff = NULL;
    }
    a->ran = !err;
    return err;
}

int oom_apply_buffer(oom_apply *a, const char *name, const char *text, size_t len, unsigned flags,
                     char **out, size_t *out_len)
{
    struct file *f;
    int err;

    *out = NULL;
    free_files(a);
    if (!(a->files = oomi_calloc(1, sizeof(*a->files))))
        return oomi_nomem();
    f = &a->files[0];
    f->fd = -1;
    a->nfiles = 1;
    a->dry = true;
    if (!(f->name = oomi_strdup(name)) || !(f->old = oomi_strndup(text, len)))
        return oomi_nomem();
    f->oldlen = len;
    if ((err = edit_file(a, f, flags)) || (err = check_edits(a, flags)))
        return err;
    if (!(*out = oomi_strndup(text_of(f), f->len)))
        return oomi_nomem();
    *out_len = f->len;
    a->ran = true;
    return OOM_OK;
}

/* ---- the report ------------------------------------------------------------------------------ */

static struct json_object *jval(const oomi_aval *v)
{
    switch (v->type) {
    case OOMI_AV_BOOL:
        return json_object_new_boolean(v->b);
    case OOMI_AV_INT:
        return json_object_new_int64(v->i);
    case OOMI_AV_FLOAT:
        return json_object_new_double(v->d);
    case OOMI_AV_STRING:
        return json_object_new_string(v->s ? v->s : "");
    default:
        return NULL;
    }
}

static int add(struct json_object *obj, const char *key, struct json_object *val, bool may_be_null)
{
    if (!val && !may_be_null) /* val could not be made */
        return OOM_ENOMEM;
    return oomi_json_put(obj, key, val);
}

/* a new object appended to arr; NULL when out of memory */
static struct json_object *array_entry(struct json_object *arr)
{
    struct json_object *o = json_object_new_object();

    if (o && json_object_array_add(arr, o)) {
        json_object_put(o);
        return NULL;
    }
    return o;
}

static int report_edit(struct json_object *arr, const struct edit *e)
{
    struct json_object *o = array_entry(arr);
    int err;

    if (!o)
        return OOM_ENOMEM;
    err = add(o, "key", json_object_new_string(e->key), false);
    err = err ? err : add(o, "action", json_object_new_string(e->res.action), false);
    if (!err && e->res.has_old)
        err = add(o, "old", jval(&e->res.old), e->res.old.type == OOMI_AV_NULL);
    if (!err && e->has_val && strcmp(e->res.action, "skipped"))
        err = add(o, "new", jval(&e->val), e->val.type == OOMI_AV_NULL);
    if (!err && e->res.reason)
        err = add(o, "reason", json_object_new_string(e->res.reason), false);
    return err;
}

static int report_note(struct json_object *arr, const struct note *n)
{
    struct json_object *o = array_entry(arr);
    int err;

    if (!o)
        return OOM_ENOMEM;
    err = n->line ? add(o, "line", json_object_new_int64((int64_t)n->line), false) : OOM_OK;
    return err ? err : add(o, "message", json_object_new_string(n->msg), false);
}

static int report_file(struct json_object *arr, const struct file *f)
{
    struct json_object *o = array_entry(arr), *edits, *notes;
    size_t i;
    int err;

    if (!o)
        return OOM_ENOMEM;
    err = add(o, "file", json_object_new_string(f->name), false);
    err = err ? err : add(o, "format", json_object_new_string(f->json ? "json" : "yaml"), false);
    err = err ? err : add(o, "changed", json_object_new_boolean(changed(f)), false);
    err = err ? err
              : add(o, "backup", f->backup ? json_object_new_string(f->backup) : NULL, !f->backup);
    err = err ? err : add(o, "edits", edits = json_object_new_array(), false);
    for (i = 0; !err && i < f->nedits; i++)
        err = report_edit(edits, &f->edits[i]);
    err = err ? err : add(o, "notes", notes = json_object_new_array(), false);
    for (i = 0; !err && i < f->nnotes; i++)
        err = report_note(notes, &f->notes[i]);
    return err;
}

int oom_apply_report(const oom_apply *a, char **out)
{
    struct json_object *doc = json_object_new_object(), *files;
    size_t i;
    int err;

    *out = NULL;
    if (!a->ran) {
        json_object_put(doc);
        return oomi_fail(OOM_EINVAL, "no apply run to report");
    }
    err = doc ? add(doc, "dry_run", json_object_new_boolean(a->dry), false) : OOM_ENOMEM;
    err = err ? err : add(doc, "written", json_object_new_boolean(a->written), false);
    err = err ? err : add(doc, "files", files = json_object_new_array(), false);
    for (i = 0; !err && i < a->nfiles; i++)
        err = report_file(files, &a->files[i]);
    if (!err)
        return oomi_json_finish(out, doc);
    json_object_put(doc);
    return oomi_nomem();
}
