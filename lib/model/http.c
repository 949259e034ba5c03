/* http.c - one HTTP(S) GET through libcurl, loaded with dlopen at the first request as NVML is:
 * the library keeps no link to it, so a machine without libcurl (or one that never names a model
 * by its Hub id) runs as before, and the error says what is missing.
 *
 * Only what the Hub client needs: TLS verification on (libcurl's default, set anyway), http and
 * https only (redirects too), at most 5 redirects, a connect timeout, a stall limit (no byte for
 * as long), an overall limit, a cap on the body, and the headers of the final response that the
 * Hub sends (ETag, X-Repo-Commit, X-Error-Code, X-Error-Message). libcurl sends a custom
 * Authorization header to the first host only, never to a host a redirect names. */
#include "model/model.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "model/curl_abi.h"

typedef size_t (*write_fn)(char *ptr, size_t size, size_t n, void *user);

typedef struct curl_api {
    int (*global_init)(long flags);
    oomi_curl *(*easy_init)(void);
    int (*easy_setopt)(oomi_curl *c, int option, ...);
    int (*easy_perform)(oomi_curl *c);
    int (*easy_getinfo)(oomi_curl *c, int info, ...);
    void (*easy_cleanup)(oomi_curl *c);
    const char *(*easy_strerror)(int code);
    struct curl_slist *(*slist_append)(struct curl_slist *list, const char *s);
    void (*slist_free_all)(struct curl_slist *list);
} curl_api;
static curl_api curl;

/* every symbol, required; resolved in a loop (a missing one is named) */
static const struct {
    const char *name;
    size_t offset;
} curl_syms[] = {
#define SYM(field, name)                                                                           \
    {                                                                                              \
        name, offsetof(curl_api, field)                                                            \
    }
    SYM(global_init, "curl_global_init"),       SYM(easy_init, "curl_easy_init"),
    SYM(easy_setopt, "curl_easy_setopt"),       SYM(easy_perform, "curl_easy_perform"),
    SYM(easy_getinfo, "curl_easy_getinfo"),     SYM(easy_cleanup, "curl_easy_cleanup"),
    SYM(easy_strerror, "curl_easy_strerror"),   SYM(slist_append, "curl_slist_append"),
    SYM(slist_free_all, "curl_slist_free_all"),
#undef SYM
};

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static char curl_problem[512]; /* why libcurl cannot be used; "" when it can */

/* $OOMLESS_CURL_LIBRARY, else libcurl.so.4 (Debian's libcurl4, OpenSSL), else the GnuTLS build */
static void load_curl(void)
{
    const char *env = getenv("OOMLESS_CURL_LIBRARY");
    const char *names[] = {env && *env ? env : "libcurl.so.4", "libcurl-gnutls.so.4"};
    size_t i, n = env && *env ? 1 : 2;
    void *h = NULL;

    for (i = 0; i < n && !h; i++)
        h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        oomi_snprintf(curl_problem, sizeof(curl_problem), "libcurl could not be loaded (%s)",
                      dlerror());
        return;
    }
    for (i = 0; i < sizeof(curl_syms) / sizeof(*curl_syms); i++) {
        void *sym = dlsym(h, curl_syms[i].name);
        if (!sym) {
            oomi_snprintf(curl_problem, sizeof(curl_problem), "libcurl '%s' has no symbol %s",
                          names[0], curl_syms[i].name);
            return;
        }
        memcpy((char *)&curl + curl_syms[i].offset, &sym, sizeof(sym));
    }
    if (curl.global_init(OOMI_CURL_GLOBAL_DEFAULT) != OOMI_CURLE_OK)
        oomi_snprintf(curl_problem, sizeof(curl_problem), "curl_global_init failed");
}

typedef struct body {
    oomi_sb sb;
    size_t max;
    bool over;
} body;

static size_t on_body(char *ptr, size_t size, size_t n, void *user)
{
    body *b = user;
    (void)size; /* always 1 */
    if (b->sb.len + n > b->max) {
        b->over = true;
        return 0; /* libcurl stops: CURLE_WRITE_ERROR */
    }
    oomi_sb_add(&b->sb, ptr, n);
    return oomi_sb_ok(&b->sb) == OOM_OK ? n : 0;
}

/* one header line "Name: value\r\n": kept when it is one of the response's fields wanted; a
 * status line ("HTTP/1.1 307 ...") starts a new response (after a redirect), forgetting all */
static size_t on_header(char *ptr, size_t size, size_t n, void *user)
{
    oomi_http_response *r = user;
    static const char *const names[] = {"etag", "x-repo-commit", "x-error-code", "x-error-message",
                                        "x-linked-etag"};
    char **fields[] = {&r->etag, &r->commit, &r->error_code, &r->error_message, &r->linked_etag};
    size_t i, len;

    (void)size; /* always 1 */
    if (n >= 5 && !strncmp(ptr, "HTTP/", 5)) {
        for (i = 0; i < sizeof(fields) / sizeof(*fields); i++)
            oomi_free(*fields[i]), *fields[i] = NULL;
        return n;
    }
    for (i = 0; i < sizeof(names) / sizeof(*names); i++) {
        len = strlen(names[i]);
        if (n > len && ptr[len] == ':' && !oomi_strncasecmp(ptr, names[i], len)) {
            const char *v = ptr + len + 1, *end = ptr + n;
            while (v < end && (*v == ' ' || *v == '\t'))
                v++;
            while (end > v && strchr(" \t\r\n", end[-1]))
                end--;
            oomi_free(*fields[i]);
            if (!(*fields[i] = oomi_strndup(v, (size_t)(end - v))))
                return 0;
        }
    }
    return n;
}

void oomi_http_response_free(oomi_http_response *r)
{
    if (!r)
        return;
    oomi_free(r->body);
    oomi_free(r->etag);
    oomi_free(r->commit);
    oomi_free(r->error_code);
    oomi_free(r->error_message);
    oomi_free(r->linked_etag);
    memset(r, 0, sizeof(*r));
}

int oomi_http_get(oomi_http_response *out, const oomi_http_request *req)
{
    struct curl_slist *headers = NULL, *h;
    char errbuf[OOMI_CURL_ERROR_SIZE] = "", *auth = NULL;
    body b = {OOMI_SB_INIT, req->max_bytes, false};
    long timeout = req->timeout_s > 0 ? req->timeout_s : 10;
    oomi_curl *c = NULL;
    int rc, err = OOM_OK;

    memset(out, 0, sizeof(*out));
    pthread_once(&curl_once, load_curl);
    if (curl_problem[0])
        return oomi_fail(OOM_EIO, "cannot fetch '%s': %s (install libcurl: Debian libcurl4)",
                         req->url, curl_problem);
    if (!(c = curl.easy_init()))
        return oomi_fail(OOM_ENOMEM, "cannot fetch '%s': curl_easy_init failed", req->url);
    if (req->bearer && !(auth = oomi_asprintf("Authorization: Bearer %s", req->bearer))) {
        err = oomi_nomem();
        goto done;
    }
    if (auth && !(h = curl.slist_append(headers, auth))) {
        err = oomi_nomem();
        goto done;
    } else if (auth) {
        headers = h;
    }
    curl.easy_setopt(c, OOMI_CURLOPT_URL, req->url);
    curl.easy_setopt(c, OOMI_CURLOPT_ERRORBUFFER, errbuf);
    curl.easy_setopt(c, OOMI_CURLOPT_NOSIGNAL, 1L);
    curl.easy_setopt(c, OOMI_CURLOPT_PROTOCOLS, (long)(OOMI_CURLPROTO_HTTP | OOMI_CURLPROTO_HTTPS));
    curl.easy_setopt(c, OOMI_CURLOPT_REDIR_PROTOCOLS,
                     (long)(OOMI_CURLPROTO_HTTP | OOMI_CURLPROTO_HTTPS));
    curl.easy_setopt(c, OOMI_CURLOPT_FOLLOWLOCATION, 1L);
    curl.easy_setopt(c, OOMI_CURLOPT_MAXREDIRS, 5L);
    curl.easy_setopt(c, OOMI_CURLOPT_SSL_VERIFYPEER, 1L);
    curl.easy_setopt(c, OOMI_CURLOPT_SSL_VERIFYHOST, 2L);
    curl.easy_setopt(c, OOMI_CURLOPT_CONNECTTIMEOUT, timeout);
    curl.easy_setopt(c, OOMI_CURLOPT_LOW_SPEED_LIMIT, 1L);     /* a stall: under 1 byte/s ... */
    curl.easy_setopt(c, OOMI_CURLOPT_LOW_SPEED_TIME, timeout); /* ... for `timeout` seconds */
    curl.easy_setopt(c, OOMI_CURLOPT_TIMEOUT, 6 * timeout);
    curl.easy_setopt(c, OOMI_CURLOPT_MAXFILESIZE_LARGE, (long long)req->max_bytes);
    curl.easy_setopt(c, OOMI_CURLOPT_USERAGENT, "oomless/" OOMLESS_VERSION);
    if (headers)
        curl.easy_setopt(c, OOMI_CURLOPT_HTTPHEADER, headers);
    curl.easy_setopt(c, OOMI_CURLOPT_WRITEFUNCTION, (write_fn)on_body);
    curl.easy_setopt(c, OOMI_CURLOPT_WRITEDATA, (void *)&b);
    curl.easy_setopt(c, OOMI_CURLOPT_HEADERFUNCTION, (write_fn)on_header);
    curl.easy_setopt(c, OOMI_CURLOPT_HEADERDATA, (void *)out);

    rc = curl.easy_perform(c);
    if (rc == OOMI_CURLE_FILESIZE_EXCEEDED || (rc == OOMI_CURLE_WRITE_ERROR && b.over)) {
        err =
            oomi_fail(OOM_EIO, "'%s' sends more than %zu bytes: refused", req->url, req->max_bytes);
    } else if (rc == OOMI_CURLE_WRITE_ERROR && oomi_sb_ok(&b.sb) != OOM_OK) {
        err = oomi_nomem();
    } else if (rc == OOMI_CURLE_OPERATION_TIMEDOUT) {
        err = oomi_fail(OOM_EIO, "'%s' did not answer within %ld s (%s)", req->url, timeout,
                        errbuf[0] ? errbuf : curl.easy_strerror(rc));
    } else if (rc != OOMI_CURLE_OK) {
        err = oomi_fail(OOM_EIO, "cannot fetch '%s': %s", req->url,
                        errbuf[0] ? errbuf : curl.easy_strerror(rc));
    } else {
        curl.easy_getinfo(c, OOMI_CURLINFO_RESPONSE_CODE, &out->status);
        out->len = b.sb.len;
        err = oomi_sb_finish(&b.sb, &out->body);
    }
done:
    oomi_sb_free(&b.sb);
    if (headers)
        curl.slist_free_all(headers);
    oomi_free(auth);
    curl.easy_cleanup(c);
    if (err)
        oomi_http_response_free(out);
    return err;
}
