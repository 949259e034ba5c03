/* apply_report.c - the report of a run (oom_apply_report): per file, each key's action, old
 * and new values, and the notes. */
#include "apply/apply.h"

#include <json-c/json.h>
#include <string.h>

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
    err = err ? err : add(o, "changed", json_object_new_boolean(oomi_apply_changed(f)), false);
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
