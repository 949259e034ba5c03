/* error.c - error codes, their names, the per-thread last message, notices and progress. */
#include "core/core.h"

#include <stdio.h>
#include <string.h>

static _Thread_local int last_code;
static _Thread_local char last_message[1024];

/* set before other calls (as the allocator), read on any thread */
static oom_notice_fn notice_fn;
static void *notice_user;

static const char *const error_names[] = {
    [OOM_OK] = "success",
    [OOM_EINVAL] = "invalid value",
    [OOM_ENOMEM] = "out of memory",
    [OOM_EIO] = "input/output error",
    [OOM_EPARSE] = "parse error",
    [OOM_ENOTFOUND] = "not found",
    [OOM_ENODEV] = "no GPU backend",
    [OOM_ENOFIT] = "does not fit",
    [OOM_EJOB] = "job failed",
    [OOM_EREFUSED] = "edit refused",
    [OOM_EUNSUPPORTED] = "unsupported",
    [OOM_EINTERRUPTED] = "interrupted",
    [OOM_EINTERNAL] = "internal error",
};

const char *oom_strerror(int code)
{
    if (code < 0 || (size_t)code >= OOMI_ARRAY_LEN(error_names) || !error_names[code])
        return "unknown error";
    return error_names[code];
}

const char *oom_last_message(void)
{
    return last_message;
}

int oom_last_error(void)
{
    return last_code;
}

void oomi_clear_error(void)
{
    last_code = OOM_OK;
    last_message[0] = '\0';
}

int oomi_failv(int code, const char *fmt, va_list ap)
{
    last_code = code;
    oomi_vsnprintf(last_message, sizeof(last_message), fmt, ap);
    return code;
}

int oomi_fail(int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    oomi_failv(code, fmt, ap);
    va_end(ap);
    return code;
}

int oomi_fail_prefix(int code, const char *fmt, ...)
{
    char prefix[512], old[sizeof(last_message)];
    va_list ap;

    memcpy(old, last_message, sizeof(old));
    va_start(ap, fmt);
    oomi_vsnprintf(prefix, sizeof(prefix), fmt, ap);
    va_end(ap);
    oomi_snprintf(last_message, sizeof(last_message), "%s%s", prefix, old);
    last_code = code;
    return code;
}

int oomi_nomem(void)
{
    return oomi_fail(OOM_ENOMEM, "out of memory");
}

void oom_set_notice_handler(oom_notice_fn fn, void *user)
{
    notice_fn = fn;
    notice_user = fn ? user : NULL;
}

/* One line, formatted, to a handler (notices, progress); nothing without one */
static void deliver(oom_notice_fn fn, void *user, const char *fmt, va_list ap) OOMI_PRINTF(3, 0);
static void deliver(oom_notice_fn fn, void *user, const char *fmt, va_list ap)
{
    char message[1024];

    if (!fn)
        return;
    oomi_vsnprintf(message, sizeof(message), fmt, ap);
    fn(message, user);
}

void oomi_notice(const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    deliver(notice_fn, notice_user, fmt, ap);
    va_end(ap);
}

static oom_notice_fn progress_fn;
static void *progress_user;

void oom_set_progress_handler(oom_notice_fn fn, void *user)
{
    progress_fn = fn;
    progress_user = fn ? user : NULL;
}

void oomi_progress(const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    deliver(progress_fn, progress_user, fmt, ap);
    va_end(ap);
}

const char *oom_version(void)
{
    return OOMLESS_VERSION;
}

/* the header's version and the build's (CMake's project version) are one */
_Static_assert(OOMLESS_VERSION_NUMBER == OOMLESS_PROJECT_VERSION_NUMBER,
               "OOMLESS_VERSION_* in include/oomless.h differ from project() in CMakeLists.txt");

unsigned oom_version_number(void)
{
    return OOMLESS_VERSION_NUMBER;
}
