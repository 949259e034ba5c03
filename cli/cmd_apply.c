/* cmd_apply.c - `oomless apply`: writes plan values into YAML/JSON config files. */
#include "cli.h"
#include "core/core.h"

#include <errno.h>
#include <getopt.h>
#include <json-c/json.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

static const char usage_text[] =
    "usage: oomless apply [--plan PLAN.json|-] [--set KEY=VALUE]... [--preset NAME]...\n"
    "                     [--create | --partial] [--allow-effective-batch-change]\n"
    "                     [--allow-skipped] [--dry-run] [--diff]\n"
    "                     [--backup-suffix S | --no-backup]\n"
    "                     [--document N] [--lock-timeout SEC] [--follow-symlinks]\n"
    "                     [--force-type] [--force] [--json] FILE...\n"
    "\n"
    "Writes plan values into YAML/JSON config files, changing only the bytes of those values.\n"
    "\n"
    "  --plan FILE|-        the plan (`oomless plan --json`); '-' reads stdin\n"
    "  --set KEY=VALUE      KEY: dotted path in the config (a.b.c, a.b[0]); VALUE: a plan field\n"
    "                       (batch_size), a dotted path into the plan document\n"
    "                       (memory.device_peak), FIELD==TEXT / FIELD!=TEXT (true/false), or\n"
    "                       literal:VALUE (8, 0.5, true, null, bf16; quote it for a string)\n"
    "  --preset NAME        hydra-lightning, deepspeed, hf-trainer, trl, axolotl,\n"
    "                       llama-factory, torchtune, or one of yours\n"
    "                       ($XDG_CONFIG_HOME/oomless/apply-presets.yaml); keys a file lacks\n"
    "                       are skipped, except a micro-batch or accumulation key (below)\n"
    "  --create             add missing keys (explicit --set keys and preset keys)\n"
    "  --partial            when the file has the micro-batch key but not the\n"
    "                       accumulation one (or the other way round), write what it has\n"
    "                       and say how the effective batch changes (refused otherwise)\n"
    "  --allow-effective-batch-change\n"
    "                       write the plan's accumulation where the file states another\n"
    "                       effective batch (without it the file's is kept: the\n"
    "                       accumulation is recomputed for the plan's micro-batch, or the\n"
    "                       edit refused); the change is said\n"
    "  --allow-skipped      write the rest where the file lacks a key the plan's memory\n"
    "                       needs (checkpointing, offload, sharding: refused otherwise,\n"
    "                       as the run would not fit); said\n"
    "  --dry-run            print the unified diff; write nothing\n"
    "  --diff               print the unified diff of what is written\n"
    "  --backup-suffix S    backup name FILE+S (default .bak; not empty); --no-backup writes\n"
    "                       none\n"
    "  --document N         the YAML document to edit in files of several (---); 1 is the\n"
    "                       first (without it such files are refused)\n"
    "  --lock-timeout SEC   wait up to SEC seconds (default 10) for another apply editing\n"
    "                       the same file\n"
    "  --follow-symlinks    edit files reached through links that lead outside '.'\n"
    "  --force-type         allow a value of another type than the old one\n"
    "  --force              replace a write-protected file (no write permission: refused\n"
    "                       otherwise); the new file keeps its mode\n"
    "  --json               print one JSON document: files, keys, old and new values\n"
    "\n"
    "Exit: 0 done, 1 an edit was refused (no file changed), 2 usage or parse error, 3 I/O.\n";

enum {
    OPT_PLAN = 256,
    OPT_SET,
    OPT_PRESET,
    OPT_CREATE,
    OPT_PARTIAL,
    OPT_ALLOW_BATCH,
    OPT_ALLOW_SKIPPED,
    OPT_DRY,
    OPT_DIFF,
    OPT_SUFFIX,
    OPT_DOCUMENT,
    OPT_LOCK_TIMEOUT,
    OPT_NOBACKUP,
    OPT_FOLLOW,
    OPT_FORCE,
    OPT_FORCE_WRITE,
    OPT_JSON,
    OPT_HELP
};

static const struct option options[] = {
    {"plan", required_argument, NULL, OPT_PLAN},
    {"set", required_argument, NULL, OPT_SET},
    {"preset", required_argument, NULL, OPT_PRESET},
    {"create", no_argument, NULL, OPT_CREATE},
    {"partial", no_argument, NULL, OPT_PARTIAL},
    {"allow-effective-batch-change", no_argument, NULL, OPT_ALLOW_BATCH},
    {"allow-skipped", no_argument, NULL, OPT_ALLOW_SKIPPED},
    {"dry-run", no_argument, NULL, OPT_DRY},
    {"diff", no_argument, NULL, OPT_DIFF},
    {"backup-suffix", required_argument, NULL, OPT_SUFFIX},
    {"document", required_argument, NULL, OPT_DOCUMENT},
    {"lock-timeout", required_argument, NULL, OPT_LOCK_TIMEOUT},
    {"no-backup", no_argument, NULL, OPT_NOBACKUP},
    {"follow-symlinks", no_argument, NULL, OPT_FOLLOW},
    {"force-type", no_argument, NULL, OPT_FORCE},
    {"force", no_argument, NULL, OPT_FORCE_WRITE},
    {"json", no_argument, NULL, OPT_JSON},
    {"help", no_argument, NULL, OPT_HELP},
    {NULL, 0, NULL, 0},
};

struct args {
    const char *plan;
    const char **sets, **presets;
    size_t nsets, npresets;
    const char *suffix;
    bool no_backup, json, diff;
    size_t document;
    double lock_timeout; /* < 0: the library's default */
    unsigned flags;
};

/* The test-only hooks: OOMLESS_APPLY_TEST_KILL_AT=STEP makes the process SIGKILL itself at that
 * step, OOMLESS_APPLY_TEST_STOP_AT=STEP stop itself (SIGSTOP) until a SIGCONT, the first time
 * it gets there. */
struct test_hooks {
    const char *kill_at, *stop_at;
    bool stopped;
};

static void test_hook(const char *step, const char *file, void *user)
{
    struct test_hooks *h = user;
    (void)file;
    if (h->stop_at && !h->stopped && !strcmp(step, h->stop_at)) {
        h->stopped = true;
        raise(SIGSTOP);
    }
    if (h->kill_at && !strcmp(step, h->kill_at))
        raise(SIGKILL);
}

/* a whole number >= 1 */
static int document_number(size_t *out, const char *text)
{
    char *end;
    unsigned long long v;

    errno = 0;
    v = strtoull(text, &end, 10);
    if (errno || end == text || *end || *text == '-' || v < 1 || v > 1000000)
        return cli_usage_error("apply",
                               "--document '%s' must be a document number (1 is the "
                               "first)",
                               text);
    *out = (size_t)v;
    return EXIT_OK;
}

static int load_plan(oom_apply *a, const char *path)
{
    char *text = NULL;
    int err = strcmp(path, "-") ? oomi_read_file(&text, NULL, path, OOMI_READ_MAX)
                                : oomi_read_fd(&text, NULL, 0, "standard input", OOMI_READ_MAX);

    if (err == OOM_EIO) /* the plan named cannot be read: a bad file, as one too large */
        err = OOM_EINVAL;
    if (!err)
        err = oom_apply_load_plan(a, text, path);
    oomi_free(text);
    return err ? cli_fail("apply", err) : EXIT_OK;
}

static int parse_args(struct args *o, int argc, char **argv)
{
    int c, rc;

    o->lock_timeout = -1;
    while ((c = getopt_long(argc, argv, "h", options, NULL)) != -1) {
        switch (c) {
        case OPT_PLAN:
            o->plan = optarg;
            break;
        case OPT_SET:
            o->sets[o->nsets++] = optarg;
            break;
        case OPT_PRESET:
            o->presets[o->npresets++] = optarg;
            break;
        case OPT_CREATE:
            o->flags |= OOM_APPLY_CREATE;
            break;
        case OPT_PARTIAL:
            o->flags |= OOM_APPLY_PARTIAL;
            break;
        case OPT_ALLOW_BATCH:
            o->flags |= OOM_APPLY_ALLOW_BATCH_CHANGE;
            break;
        case OPT_ALLOW_SKIPPED:
            o->flags |= OOM_APPLY_ALLOW_SKIPPED;
            break;
        case OPT_DRY:
            o->flags |= OOM_APPLY_DRY_RUN;
            break;
        case OPT_DIFF:
            o->diff = true;
            break;
        case OPT_SUFFIX:
            o->suffix = optarg;
            break;
        case OPT_DOCUMENT:
            if ((rc = document_number(&o->document, optarg)))
                return rc;
            break;
        case OPT_LOCK_TIMEOUT:
            if ((rc = cli_seconds(&o->lock_timeout, "apply", optarg, "--lock-timeout", 0, 86400)))
                return rc;
            break;
        case OPT_NOBACKUP:
            o->no_backup = true;
            break;
        case OPT_FOLLOW:
            o->flags |= OOM_APPLY_FOLLOW_SYMLINKS;
            break;
        case OPT_FORCE:
            o->flags |= OOM_APPLY_FORCE_TYPE;
            break;
        case OPT_FORCE_WRITE:
            o->flags |= OOM_APPLY_FORCE;
            break;
        case OPT_JSON:
            o->json = true;
            break;
        case 'h':
        case OPT_HELP:
            fputs(usage_text, stdout);
            return -1;
        default:
            return cli_usage_error("apply", "unknown option");
        }
    }
    if ((o->flags & OOM_APPLY_CREATE) && (o->flags & OOM_APPLY_PARTIAL))
        return cli_usage_error("apply", "--create and --partial contradict each other (one "
                                        "adds the missing key, the other writes without it)");
    if (o->suffix && o->no_backup)
        return cli_usage_error("apply", "--backup-suffix and --no-backup contradict each other");
    if (o->diff && o->json)
        return cli_usage_error("apply", "--diff and --json both print on stdout; give one");
    if (optind >= argc)
        return cli_usage_error("apply", "no FILE to edit");
    if (!o->nsets && !o->npresets)
        return cli_usage_error("apply", "nothing to set: give --set KEY=VALUE or --preset NAME");
    return EXIT_OK;
}

/* presets first, so that an explicit --set of the same key wins */
static int add_assignments(oom_apply *a, const struct args *o)
{
    size_t i;
    int err;
    char *eq, *key;

    for (i = 0; i < o->npresets; i++)
        if ((err = oom_apply_preset(a, o->presets[i])))
            return cli_fail("apply", err);
    for (i = 0; i < o->nsets; i++) {
        if (!(eq = strchr(o->sets[i], '=')) || eq == o->sets[i])
            return cli_usage_error("apply", "--set '%s': expected KEY=VALUE", o->sets[i]);
        if (!(key = strndup(o->sets[i], (size_t)(eq - o->sets[i]))))
            return cli_fail("apply", OOM_ENOMEM);
        err = oom_apply_set(a, key, eq + 1, 0);
        free(key);
        if (err)
            return cli_fail("apply", err);
    }
    if (o->no_backup || o->suffix)
        if ((err = oom_apply_set_backup_suffix(a, o->no_backup ? NULL : o->suffix)))
            return cli_fail("apply", err);
    if ((err = oom_apply_set_document(a, o->document)) ||
        (o->lock_timeout >= 0 && (err = oom_apply_set_lock_timeout(a, o->lock_timeout))))
        return cli_fail("apply", err);
    return EXIT_OK;
}

static void print_value(struct json_object *e, const char *key)
{
    struct json_object *v;
    if (!json_object_object_get_ex(e, key, &v))
        fputs("-", stderr);
    else
        fputs(json_object_to_json_string_ext(v, JSON_C_TO_STRING_NOSLASHESCAPE), stderr);
}

/* the notes of a file: "conf/config.yaml:10: comment mentions effective batch 225; ..." */
static void print_notes(struct json_object *f)
{
    struct json_object *notes = oomi_json_get(f, "notes"), *n, *line;
    size_t i;

    for (i = 0; notes && i < json_object_array_length(notes); i++) {
        n = json_object_array_get_idx(notes, i);
        fputs(json_object_get_string(oomi_json_get(f, "file")), stderr);
        if ((line = oomi_json_get(n, "line")))
            fprintf(stderr, ":%lld", (long long)json_object_get_int64(line));
        fprintf(stderr, ": %s\n", json_object_get_string(oomi_json_get(n, "message")));
    }
}

/* one line per edit on stderr: "conf/config.yaml: data_loader.batch_size 45 -> 8", then the
 * file's notes */
static void summary(const char *report)
{
    struct json_object *doc = json_tokener_parse(report), *files, *f, *edits, *e;
    size_t i, j;

    if (!(files = oomi_json_get(doc, "files")))
        goto done;
    for (i = 0; i < json_object_array_length(files); i++) {
        f = json_object_array_get_idx(files, i);
        edits = oomi_json_get(f, "edits");
        for (j = 0; j < json_object_array_length(edits); j++) {
            e = json_object_array_get_idx(edits, j);
            fprintf(stderr, "%s: %s %s ", json_object_get_string(oomi_json_get(f, "file")),
                    json_object_get_string(oomi_json_get(e, "action")),
                    json_object_get_string(oomi_json_get(e, "key")));
            print_value(e, "old");
            fputs(" -> ", stderr);
            if (oomi_json_get(e, "reason"))
                fprintf(stderr, "(%s)", json_object_get_string(oomi_json_get(e, "reason")));
            else
                print_value(e, "new");
            fputc('\n', stderr);
        }
        print_notes(f);
        if (json_object_get_boolean(oomi_json_get(doc, "written")) && oomi_json_get(f, "backup"))
            fprintf(stderr, "%s: backup in %s\n", json_object_get_string(oomi_json_get(f, "file")),
                    json_object_get_string(oomi_json_get(f, "backup")));
    }
done:
    json_object_put(doc);
}

static int run(oom_apply *a, const struct args *o, const char *const *files, size_t count)
{
    char *diff = NULL, *report = NULL;
    struct test_hooks hooks = {getenv("OOMLESS_APPLY_TEST_KILL_AT"),
                               getenv("OOMLESS_APPLY_TEST_STOP_AT"), false};
    bool want_diff = o->diff || ((o->flags & OOM_APPLY_DRY_RUN) && !o->json);
    int err, rc = EXIT_OK;

    if ((hooks.kill_at && *hooks.kill_at) || (hooks.stop_at && *hooks.stop_at))
        oom_apply_set_step_hook(a, test_hook, &hooks);
    /* a file size limit is an error to report, not a death */
    cli_set_signals(&(const int){SIGXFSZ}, 1, SIG_IGN);
    /* the diff costs time and memory in proportion to the files: made only when printed */
    err = oom_apply_run(a, files, count, o->flags, want_diff ? &diff : NULL);
    if (!err)
        err = oom_apply_report(a, &report);
    if (err) {
        rc = cli_fail("apply", err);
    } else if (o->json) {
        rc = cli_print_json(report);
    } else {
        summary(report);
        if (want_diff)
            fputs(diff, stdout);
        if (fflush(stdout))
            rc = EXIT_ENV;
    }
    oom_free(diff);
    oom_free(report);
    return rc;
}

int cmd_apply(int argc, char **argv)
{
    struct args o = {0};
    oom_apply *a = NULL;
    int rc;

    o.sets = calloc((size_t)argc, sizeof(*o.sets));
    o.presets = calloc((size_t)argc, sizeof(*o.presets));
    if (!o.sets || !o.presets) {
        rc = cli_fail("apply", OOM_ENOMEM);
        goto done;
    }
    if ((rc = parse_args(&o, argc, argv)) != EXIT_OK) {
        rc = rc < 0 ? EXIT_OK : rc;
        goto done;
    }
    if (oom_apply_create(&a)) {
        rc = cli_fail("apply", OOM_ENOMEM);
        goto done;
    }
    if ((o.plan && (rc = load_plan(a, o.plan))) || (rc = add_assignments(a, &o)))
        goto done;
    rc = run(a, &o, (const char *const *)argv + optind, (size_t)(argc - optind));
done:
    oom_apply_free(a);
    free(o.sets);
    free(o.presets);
    return rc;
}
