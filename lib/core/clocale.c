/*
 * clocale.c - numbers read and written in the C locale, whatever the host program's locale, and
 * letters compared as ASCII.
 *
 * A program that called setlocale(LC_ALL, "de_DE.UTF-8") (Python's locale module does it in one
 * line) makes strtod stop at the '.' of "20.5" and printf write "20,5". The library's files,
 * JSON documents and messages use '.' always: every conversion of a number to or from text in
 * lib/ goes through these functions, which switch the calling thread to the C locale for the
 * call (uselocale: per thread, so other threads of the host keep theirs).
 * Case is folded in ASCII for the same reason: under tr_TR.UTF-8, tolower('I') is not 'i'
 * (Turkish has a dotless i), so "16GIB" was no size there.
 * scripts/check-c-locale.py fails the build's tests on a direct call anywhere else.
 */
#include "core/core.h"

#include <errno.h>
#include <locale.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

static locale_t c_locale;
static pthread_once_t c_locale_once = PTHREAD_ONCE_INIT;

static void make_c_locale(void)
{
    /* glibc and musl return a static object for "C": this neither allocates nor fails there */
    c_locale = newlocale(LC_ALL_MASK, "C", (locale_t)0);
}

/* Switches this thread to the C locale; returns what to give back to leave_c() (0: nothing). */
static locale_t enter_c(void)
{
    pthread_once(&c_locale_once, make_c_locale);
    return c_locale ? uselocale(c_locale) : (locale_t)0;
}

static void leave_c(locale_t previous)
{
    if (previous)
        uselocale(previous);
}

double oomi_strtod(const char *text, char **end)
{
    locale_t previous = enter_c();
    double v = strtod(text, end);
    int saved = errno; /* ERANGE is the caller's to see */
    leave_c(previous);
    errno = saved;
    return v;
}

int oomi_vsnprintf(char *buf, size_t size, const char *fmt, va_list ap)
{
    locale_t previous = enter_c();
    int n = vsnprintf(buf, size, fmt, ap);
    leave_c(previous);
    return n;
}

int oomi_snprintf(char *buf, size_t size, const char *fmt, ...)
{
    va_list ap;
    int n;

    va_start(ap, fmt);
    n = oomi_vsnprintf(buf, size, fmt, ap);
    va_end(ap);
    return n;
}

int oomi_tolower(int c)
{
    return c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c;
}

int oomi_toupper(int c)
{
    return c >= 'a' && c <= 'z' ? c - 'a' + 'A' : c;
}

int oomi_isupper(int c)
{
    return c >= 'A' && c <= 'Z';
}

int oomi_isalpha(int c)
{
    return oomi_isupper(c) || (c >= 'a' && c <= 'z');
}

int oomi_isalnum(int c)
{
    return oomi_isalpha(c) || (c >= '0' && c <= '9');
}

int oomi_strncasecmp(const char *a, const char *b, size_t n)
{
    for (; n; a++, b++, n--) {
        int ca = oomi_tolower((unsigned char)*a), cb = oomi_tolower((unsigned char)*b);
        if (ca != cb || !ca)
            return ca - cb;
    }
    return 0;
}

int oomi_strcasecmp(const char *a, const char *b)
{
    return oomi_strncasecmp(a, b, (size_t)-1);
}
