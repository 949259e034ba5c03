/* hub.c - a model's config.json fetched from the Hugging Face Hub as huggingface_hub fetches it,
 * and written into the same cache, so that the next lookup (ours or the Hub client's) finds it
 * without the network.
 *
 * The environment is huggingface_hub's (its documented variables, huggingface_hub/constants.py):
 * $HF_ENDPOINT (default https://huggingface.co), $HF_TOKEN, else the token file $HF_TOKEN_PATH
 * or $HF_HOME/token (what `hf auth login` writes), $HF_HUB_OFFLINE (1/ON/YES/TRUE: never use the
 * network), $HF_HUB_ETAG_TIMEOUT and $HF_HUB_DOWNLOAD_TIMEOUT (seconds, default 10).
 *
 * The requests: GET {endpoint}/api/models/{id}/revision/{revision} (the commit a revision names,
 * and whether the repository exists and may be read), then GET
 * {endpoint}/{id}/resolve/{commit}/config.json. The cache ({cache}/models--ORG--NAME): the file
 * in blobs/{etag}, a relative symlink snapshots/{commit}/config.json -> ../../blobs/{etag}, and
 * refs/{revision} holding the commit; each written to a temporary name and renamed. */
#include "model/model.h"

#include <errno.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define HUB_API_MAX          (16u << 20) /* a revision's document lists every file of the repository */
#define HUB_CONFIG_MAX       (16u << 20) /* a config.json is kilobytes; a generous cap */
#define HUB_DEFAULT_ENDPOINT "https://huggingface.co"

static bool env_true(const char *name)
{
    const char *v = getenv(name);
    return v && (!strcmp(v, "1") || !oomi_strcasecmp(v, "on") || !oomi_strcasecmp(v, "yes") ||
                 !oomi_strcasecmp(v, "true"));
}

bool oomi_hub_offline(void)
{
    return env_true("HF_HUB_OFFLINE");
}

/* $name as whole seconds in 1..600, else 10 (a bad value with a notice) */
static long env_timeout(const char *name)
{
    const char *v = getenv(name);
    char *end;
    long s;

    if (!v || !*v)
        return 10;
    errno = 0;
    s = strtol(v, &end, 10);
    if (errno || *end || s < 1 || s > 600) {
        oomi_notice("$%s '%s' is not a whole number of seconds from 1 to 600: 10 s taken", name, v);
        return 10;
    }
    return s;
}

/* $HF_HOME, else $XDG_CACHE_HOME/huggingface, else ~/.cache/huggingface (*out NULL: none) */
static int hf_home(char **out)
{
    const char *home = getenv("HF_HOME");
    char *base = NULL;
    int err;

    *out = NULL;
    if (home && *home)
        return (*out = oomi_strdup(home)) ? OOM_OK : oomi_nomem();
    if ((err = oomi_xdg_base(&base, NULL, "XDG_CACHE_HOME", ".cache")) || !base)
        return err;
    *out = oomi_asprintf("%s/huggingface", base);
    oomi_free(base);
    return *out ? OOM_OK : oomi_nomem();
}

int oomi_hub_cache(char **out)
{
    const char *hub = getenv("HF_HUB_CACHE");
    char *home = NULL;
    int err;

    *out = NULL;
    if (hub && *hub)
        return (*out = oomi_strdup(hub)) ? OOM_OK : oomi_nomem();
    if ((err = hf_home(&home)) || !home)
        return err;
    *out = oomi_asprintf("%s/hub", home);
    oomi_free(home);
    return *out ? OOM_OK : oomi_nomem();
}

/* The token: $HF_TOKEN, else the first line of $HF_TOKEN_PATH or $HF_HOME/token; NULL if none */
static int hub_token(char **out)
{
    const char *env = getenv("HF_TOKEN"), *path_env = getenv("HF_TOKEN_PATH");
    char *path = NULL, *home = NULL, *text = NULL, *s, *e;
    struct stat st;
    int err = OOM_OK;

    *out = NULL;
    if (env && *env)
        return (*out = oomi_strdup(env)) ? OOM_OK : oomi_nomem();
    if (path_env && *path_env) {
        if (!(path = oomi_strdup(path_env)))
            return oomi_nomem();
    } else {
        if ((err = hf_home(&home)) || !home)
            return err;
        path = oomi_asprintf("%s/token", home);
        oomi_free(home);
        if (!path)
            return oomi_nomem();
    }
    if (stat(path, &st) != 0 || !S_ISREG(st.st_mode)) {
        oomi_free(path);
        return OOM_OK;
    }
    err = oomi_read_file(&text, NULL, path, 4096);
    oomi_free(path);
    if (err)
        return err == OOM_ENOMEM ? err : OOM_OK; /* unreadable: as if none */
    for (s = text; *s == ' ' || *s == '\t' || *s == '\n' || *s == '\r'; s++)
        ;
    for (e = s; *e && !strchr(" \t\r\n", *e); e++)
        ;
    if (e > s && !(*out = oomi_strndup(s, (size_t)(e - s))))
        err = oomi_nomem();
    oomi_free(text);
    return err;
}

/* A revision: letters, digits, '.', '_', '-', and '/' between non-empty parts that are not "."
 * or ".." (refs/pr/1); it names a file under refs/. */
static bool valid_revision(const char *rev)
{
    const char *p = rev;
    if (!*rev || *rev == '/' || strstr(rev, "//") || rev[strlen(rev) - 1] == '/')
        return false;
    for (; *p; p++)
        if (!oomi_isalnum((unsigned char)*p) && !strchr("._-/", *p))
            return false;
    return strcmp(rev, ".") && strcmp(rev, "..") && strncmp(rev, "../", 3) &&
           strncmp(rev, "./", 2) && !strstr(rev, "/../") && !strstr(rev, "/./");
}

static bool valid_commit(const char *s)
{
    size_t i;
    for (i = 0; i < 40; i++)
        if (!s[i] || !strchr("0123456789abcdef", s[i]))
            return false;
    return !s[40];
}

/* The ETag of a response as huggingface_hub names the blob: X-Linked-Etag (a file in LFS) else
 * ETag, without W/ and quotes; refused unless a plain file name. */
static int blob_name(char **out, const oomi_http_response *r, const char *url)
{
    const char *e = r->linked_etag ? r->linked_etag : r->etag;
    size_t len, i;

    *out = NULL;
    if (!e)
        return oomi_fail(OOM_EIO, "'%s' sent no ETag: the Hub's answer was expected", url);
    if (!strncmp(e, "W/", 2))
        e += 2;
    len = strlen(e);
    if (len >= 2 && e[0] == '"' && e[len - 1] == '"')
        e++, len -= 2;
    for (i = 0; i < len; i++)
        if (!oomi_isalnum((unsigned char)e[i]) && !strchr("-_", e[i]))
            break;
    if (!len || i < len || len > 128)
        return oomi_fail(OOM_EIO, "'%s' sent the ETag '%s', which is no blob name", url, e);
    return (*out = oomi_strndup(e, len)) ? OOM_OK : oomi_nomem();
}

/* mkdir -p of `path` (0755) */
static int make_dirs(const char *path)
{
    char *p = oomi_strdup(path), *s;
    int err = OOM_OK;

    if (!p)
        return oomi_nomem();
    for (s = p + 1;; s++) {
        if (*s != '/' && *s)
            continue;
        char c = *s;
        *s = '\0';
        if (mkdir(p, 0755) != 0 && errno != EEXIST) {
            err = oomi_fail(OOM_EIO, "cannot create the folder '%s': %s", p, strerror(errno));
            break;
        }
        if (!(*s = c))
            break;
    }
    oomi_free(p);
    return err;
}

/* `data` into `path` whole or not at all: a temporary file beside it, renamed */
static int write_atomic(const char *path, const char *data, size_t len)
{
    char *tmp = NULL;
    int err = oomi_write_temp(&tmp, path, -1, data, len, NULL, NULL);
    if (!err && (err = oomi_rename_temp(tmp, path, NULL, NULL)))
        unlink(tmp);
    oomi_free(tmp);
    return err;
}

/* a symlink `path` -> `target`, made under a temporary name and renamed over any old one */
static int link_atomic(const char *path, const char *target)
{
    char *tmp = oomi_asprintf("%s.oomless-%ld", path, (long)getpid());
    int err = OOM_OK;

    if (!tmp)
        return oomi_nomem();
    unlink(tmp);
    if (symlink(target, tmp) != 0)
        err = oomi_fail(OOM_EIO, "cannot create the link '%s': %s", tmp, strerror(errno));
    else if (rename(tmp, path) != 0) {
        err = oomi_fail(OOM_EIO, "cannot rename '%s' to '%s': %s", tmp, path, strerror(errno));
        unlink(tmp);
    }
    oomi_free(tmp);
    return err;
}

typedef struct hub_req {
    const char *id, *revision, *endpoint, *token;
} hub_req;

/* The error of a refused request, said as huggingface_hub's errors say it (X-Error-Code first,
 * then the status): a gated or private repository, a missing one, a missing revision or file.
 * Said of the model ("it ..."): the caller names it. */
static int refused(const hub_req *q, const oomi_http_response *r, const char *url)
{
    const char *code = r->error_code ? r->error_code : "";
    const char *token =
        q->token ? "the token given ($HF_TOKEN or the token file) was refused" : "no token is set";

    if (!strcmp(code, "GatedRepo") || ((r->status == 401 || r->status == 403) && !*code))
        return oomi_fail(OOM_ENOTFOUND,
                         "it is gated or private on %s (HTTP %ld; %s): accept its licence on "
                         "%s/%s with your account, and set $HF_TOKEN to a token of that account "
                         "(or run 'hf auth login')",
                         q->endpoint, r->status, token, q->endpoint, q->id);
    if (!strcmp(code, "RevisionNotFound"))
        return oomi_fail(OOM_ENOTFOUND, "it has no revision '%s' on %s (HTTP %ld)", q->revision,
                         q->endpoint, r->status);
    if (!strcmp(code, "EntryNotFound"))
        return oomi_fail(OOM_ENOTFOUND, "it has no config.json on %s (HTTP %ld: %s)", q->endpoint,
                         r->status, url);
    if (!strcmp(code, "RepoNotFound") || r->status == 404 || r->status == 401)
        return oomi_fail(OOM_ENOTFOUND,
                         "%s has no such model (HTTP %ld): check its spelling; a private one "
                         "needs $HF_TOKEN (%s)",
                         q->endpoint, r->status, token);
    return oomi_fail(OOM_EIO, "'%s' answered HTTP %ld%s%s", url, r->status,
                     r->error_message ? ": " : "", r->error_message ? r->error_message : "");
}

/* The revision as one path segment of a URL: '/' (refs/pr/1) as %2F, as huggingface_hub quotes it
 */
static char *quote_revision(const char *rev)
{
    oomi_sb sb = OOMI_SB_INIT;
    char *out = NULL;
    for (; *rev; rev++)
        *rev == '/' ? oomi_sb_puts(&sb, "%2F") : oomi_sb_putc(&sb, *rev);
    oomi_sb_finish(&sb, &out);
    return out;
}

/* The commit `revision` names (the document's "sha") */
static int resolve_commit(char **out, const hub_req *q, long timeout)
{
    char *rev = quote_revision(q->revision);
    char *url = rev ? oomi_asprintf("%s/api/models/%s/revision/%s", q->endpoint, q->id, rev) : NULL;
    oomi_http_request req = {url, q->token, timeout, HUB_API_MAX};
    oomi_http_response r;
    json_object *doc = NULL, *sha;
    int err;

    *out = NULL;
    if (!url)
        return oomi_nomem();
    if ((err = oomi_http_get(&r, &req)))
        goto done;
    if (r.status != 200) {
        err = refused(q, &r, url);
    } else if (!(err = oomi_json_load(&doc, r.body, r.len, url))) {
        if (!json_object_object_get_ex(doc, "sha", &sha) ||
            !json_object_is_type(sha, json_type_string) ||
            !valid_commit(json_object_get_string(sha)))
            err = oomi_fail(OOM_EPARSE, "'%s': no commit ('sha' of 40 hexadecimal digits)", url);
        else if (!(*out = oomi_strdup(json_object_get_string(sha))))
            err = oomi_nomem();
    }
    oomi_http_response_free(&r);
done:
    json_object_put(doc);
    oomi_free(url);
    oomi_free(rev);
    return err;
}

/* config.json of `commit` into the cache folder `repo`; *out the snapshot's path */
static int download(char **out, const hub_req *q, const char *repo, const char *commit,
                    long timeout)
{
    char *url = oomi_asprintf("%s/%s/resolve/%s/config.json", q->endpoint, q->id, commit);
    char *blob = NULL, *blobs = NULL, *blob_path = NULL, *snap = NULL, *target = NULL;
    oomi_http_request req = {url, q->token, timeout, HUB_CONFIG_MAX};
    oomi_http_response r;
    json_object *doc = NULL;
    int err;

    *out = NULL;
    if (!url)
        return oomi_nomem();
    if ((err = oomi_http_get(&r, &req)))
        goto done;
    if (r.status != 200)
        err = refused(q, &r, url);
    else if (!(err = oomi_json_load(&doc, r.body, r.len, url)) &&
             !json_object_is_type(doc, json_type_object))
        err = oomi_fail(OOM_EPARSE, "'%s' is not a JSON object", url);
    if (!err && !(err = blob_name(&blob, &r, url))) {
        blobs = oomi_asprintf("%s/blobs", repo);
        blob_path = oomi_asprintf("%s/blobs/%s", repo, blob);
        snap = oomi_asprintf("%s/snapshots/%s", repo, commit);
        target = oomi_asprintf("../../blobs/%s", blob);
        *out = oomi_asprintf("%s/snapshots/%s/config.json", repo, commit);
        if (!blobs || !blob_path || !snap || !target || !*out)
            err = oomi_nomem();
        else if (!(err = make_dirs(blobs)) && !(err = make_dirs(snap)) &&
                 !(err = write_atomic(blob_path, r.body, r.len)))
            err = link_atomic(*out, target);
        if (!err)
            oomi_progress("fetched config.json of %s (%zu bytes, commit %.7s) into %s", q->id,
                          r.len, commit, *out);
    }
    oomi_http_response_free(&r);
done:
    json_object_put(doc);
    oomi_free(blob);
    oomi_free(blobs);
    oomi_free(blob_path);
    oomi_free(snap);
    oomi_free(target);
    oomi_free(url);
    if (err) {
        oomi_free(*out);
        *out = NULL;
    }
    return err;
}

/* refs/{revision} holds `commit` (unless the revision is that commit) */
static int write_ref(const char *repo, const char *revision, const char *commit)
{
    char *ref, *dir, *slash;
    int err;

    if (!strcmp(revision, commit))
        return OOM_OK;
    if (!(ref = oomi_asprintf("%s/refs/%s", repo, revision)))
        return oomi_nomem();
    if (!(dir = oomi_strdup(ref))) {
        oomi_free(ref);
        return oomi_nomem();
    }
    slash = strrchr(dir, '/');
    *slash = '\0';
    if (!(err = make_dirs(dir)))
        err = write_atomic(ref, commit, strlen(commit));
    oomi_free(dir);
    oomi_free(ref);
    return err;
}

int oomi_hub_fetch(char **out, const char *repo, const char *id, const char *revision)
{
    const char *endpoint = getenv("HF_ENDPOINT");
    char *ep = NULL, *token = NULL, *commit = NULL, *have = NULL;
    hub_req q = {id, revision, NULL, NULL};
    struct stat st;
    size_t len;
    int err;

    *out = NULL;
    if (!valid_revision(revision))
        return oomi_fail(OOM_EINVAL, "the revision '%s' is no branch, tag or commit name",
                         revision);
    if (oomi_hub_offline())
        return oomi_fail(OOM_EIO, "$HF_HUB_OFFLINE is set");
    if (!(ep = oomi_strdup(endpoint && *endpoint ? endpoint : HUB_DEFAULT_ENDPOINT)))
        return oomi_nomem();
    for (len = strlen(ep); len && ep[len - 1] == '/'; len--)
        ep[len - 1] = '\0';
    q.endpoint = ep;
    if ((err = hub_token(&token)))
        goto done;
    q.token = token;
    oomi_progress("fetching config.json of %s%s%s from %s", id, strcmp(revision, "main") ? "@" : "",
                  strcmp(revision, "main") ? revision : "", ep);
    if ((err = resolve_commit(&commit, &q, env_timeout("HF_HUB_ETAG_TIMEOUT"))))
        goto done;
    if (!(have = oomi_asprintf("%s/snapshots/%s/config.json", repo, commit))) {
        err = oomi_nomem();
        goto done;
    }
    if (stat(have, &st) == 0 && S_ISREG(st.st_mode)) /* that commit is cached already */
        *out = have, have = NULL;
    else
        err = download(out, &q, repo, commit, env_timeout("HF_HUB_DOWNLOAD_TIMEOUT"));
    if (!err)
        err = write_ref(repo, revision, commit);
done:
    if (err) {
        oomi_free(*out);
        *out = NULL;
    }
    oomi_free(have);
    oomi_free(commit);
    if (token) {
        memset(token, 0, strlen(token));
        oomi_free(token);
    }
    oomi_free(ep);
    return err;
}
