/* units.c - strict numbers, sizes ("16GiB", "20.5", "512MiB"), margins ("10%"), budgets; a
 * decimal comma ("20,5") named as such in all of them. */
#include "core/core.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct unit {
    const char *name;
    int shift;
};

/* Every unit is binary, as nvidia-smi's "MiB" and the usual "16gb = 16384 MB" of
 * training scripts both mean. */
static const struct unit units[] = {
    {"b", 0},  {"k", 10},  {"kb", 10},  {"kib", 10}, {"m", 20},  {"mb", 20},  {"mib", 20},
    {"g", 30}, {"gb", 30}, {"gib", 30}, {"t", 40},   {"tb", 40}, {"tib", 40},
};

int oomi_check_decimal_comma(const char *text, const char *what)
{
    const char *p = text, *digits;

    if (!p)
        return OOM_OK;
    while (isspace((unsigned char)*p))
        p++;
    if (*p == '-' || *p == '+')
        p++;
    for (digits = p; isdigit((unsigned char)*p); p++)
        ;
    if (p == digits || *p != ',' || !isdigit((unsigned char)p[1]))
        return OOM_OK;
    return oomi_fail(OOM_EINVAL,
                     "%s '%s' has a comma: write the decimal separator as '.' (20.5, not 20,5), "
                     "with no thousands separator (1000, not 1,000), whatever the locale",
                     what, text);
}

int oomi_parse_long(long long *out, const char *text, long long min, long long max,
                    const char *what)
{
    char *end;
    long long v;

    if (!text || !*text || isspace((unsigned char)*text))
        return oomi_fail(OOM_EINVAL, "%s '%s' is not an integer", what, text ? text : "");
    errno = 0;
    v = strtoll(text, &end, 10);
    if ((*end || errno == ERANGE) && oomi_check_decimal_comma(text, what))
        return OOM_EINVAL;
    if (*end || errno == ERANGE)
        return oomi_fail(OOM_EINVAL, "%s '%s' is not an integer in range", what, text);
    if (v < min || v > max)
        return oomi_fail(OOM_EINVAL, "%s '%s' is out of range [%lld, %lld]", what, text, min, max);
    *out = v;
    return OOM_OK;
}

int oomi_parse_double(double *out, const char *text, const char *what)
{
    char *end;
    double v;

    if (!text || !*text || isspace((unsigned char)*text))
        return oomi_fail(OOM_EINVAL, "%s '%s' is not a number", what, text ? text : "");
    errno = 0;
    v = oomi_strtod(text, &end);
    if (*end && oomi_check_decimal_comma(text, what))
        return OOM_EINVAL;
    if (*end || errno == ERANGE || !isfinite(v))
        return oomi_fail(OOM_EINVAL, "%s '%s' is not a finite number", what, text);
    *out = v;
    return OOM_OK;
}

int oomi_parse_confidence(double *out, const char *text, const char *what)
{
    char num[32];
    size_t len = text ? strlen(text) : 0;
    double v;
    int err, pct = len > 1 && len < sizeof(num) && text[len - 1] == '%';

    if (pct)
        oomi_snprintf(num, sizeof(num), "%.*s", (int)(len - 1), text);
    if ((err = oomi_parse_double(&v, pct ? num : text, what)))
        return err;
    if (pct)
        v /= 100;
    if (!(v > 0 && v < 1))
        return oomi_fail(OOM_EINVAL, "%s '%s' is not a confidence between 0 and 1 (0.95 or 95%%)",
                         what, text);
    *out = v;
    return OOM_OK;
}

/* Splits "  20.5 GiB " into a number and a unit; strtod's extras (hex, inf, nan) are refused. */
static int parse_number_unit(double *num, int *shift, bool *has_unit, const char *text,
                             const char *what)
{
    const char *p = text, *q;
    char unit[8];
    size_t n = 0, i;
    char *end;
    int err;

    while (isspace((unsigned char)*p))
        p++;
    for (q = p; *q && (isdigit((unsigned char)*q) || *q == '.' || *q == 'e' || *q == 'E' ||
                       *q == '+' || *q == '-');
         q++)
        ;
    if (q == p || *p == '-' || *p == '+')
        goto bad;
    /* "1e" followed by a unit letter: back off so that "16e" is not eaten as an exponent. */
    errno = 0;
    *num = oomi_strtod(p, &end);
    if (end == p || errno == ERANGE || !isfinite(*num) || end > q)
        goto bad;
    p = end;
    while (isspace((unsigned char)*p))
        p++;
    while (*p && !isspace((unsigned char)*p) && n + 1 < sizeof(unit))
        unit[n++] = (char)oomi_tolower((unsigned char)*p++);
    unit[n] = '\0';
    while (isspace((unsigned char)*p))
        p++;
    if (*p)
        goto bad;
    *has_unit = n > 0;
    *shift = -1;
    if (!n)
        return OOM_OK;
    for (i = 0; i < OOMI_ARRAY_LEN(units); i++)
        if (!strcmp(unit, units[i].name))
            *shift = units[i].shift;
    if (*shift < 0 && (err = oomi_check_decimal_comma(text, what)) == OOM_OK)
        return oomi_fail(OOM_EINVAL, "%s '%s' has an unknown unit (use B, KiB, MiB, GiB or TiB)",
                         what, text);
    return *shift < 0 ? err : OOM_OK;
bad:
    if ((err = oomi_check_decimal_comma(text, what)))
        return err;
    return oomi_fail(OOM_EINVAL, "%s '%s' is not a size (examples: 24, 20.5, 16GiB, 512MiB)", what,
                     text);
}

static int to_bytes(uint64_t *out, double num, int shift, const char *text, const char *what)
{
    double bytes = ldexp(num, shift);
    if (bytes < 0 || bytes >= 9.2233720368547758e18)
        return oomi_fail(OOM_EINVAL, "%s '%s' is out of range", what, text);
    *out = (uint64_t)llround(bytes);
    return OOM_OK;
}

int oom_parse_size(uint64_t *out, const char *text, oom_size_unit bare_unit)
{
    double num = 0;
    int shift = 0, err;
    bool has_unit;

    if (!out || !text)
        return oomi_fail(OOM_EINVAL, "size is missing");
    if ((err = parse_number_unit(&num, &shift, &has_unit, text, "size")))
        return err;
    if (!has_unit)
        shift = bare_unit == OOM_UNIT_GIB ? 30 : bare_unit == OOM_UNIT_MIB ? 20 : 0;
    return to_bytes(out, num, shift, text, "size");
}

int oom_parse_margin(uint64_t *out, const char *text, uint64_t target_bytes)
{
    size_t n;
    char buf[64];
    double pct;
    int err;

    if (!out || !text)
        return oomi_fail(OOM_EINVAL, "safety margin is missing");
    if ((err = oomi_check_decimal_comma(text, "safety margin")))
        return err;
    n = strlen(text);
    while (n && isspace((unsigned char)text[n - 1]))
        n--;
    if (n && text[n - 1] == '%') {
        if (n - 1 >= sizeof(buf))
            return oomi_fail(OOM_EINVAL, "safety margin '%s' is not a percentage", text);
        memcpy(buf, text, n - 1);
        buf[n - 1] = '\0';
        while (buf[0] && isspace((unsigned char)buf[strlen(buf) - 1]))
            buf[strlen(buf) - 1] = '\0';
        if ((err = oomi_parse_double(&pct, buf, "safety margin")))
            return oomi_fail(OOM_EINVAL, "safety margin '%s' is not a percentage", text);
        if (pct < 0 || pct >= 100)
            return oomi_fail(OOM_EINVAL, "safety margin '%s' must be in [0%%, 100%%)", text);
        *out = (uint64_t)llround((double)target_bytes * pct / 100.0);
        return OOM_OK;
    }
    if ((err = oom_parse_size(out, text, OOM_UNIT_MIB)))
        return oomi_fail(err,
                         "safety margin '%s' is not a size or percentage (examples: 1024, "
                         "512MiB, 1GiB, 10%%)",
                         text);
    return OOM_OK;
}

char *oom_format_size(char *buf, size_t bufsize, uint64_t bytes)
{
    static const char *const names[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    double v = (double)bytes;
    size_t i = 0;

    if (!buf || !bufsize)
        return buf;
    if (bytes < 1024) {
        oomi_snprintf(buf, bufsize, "%u B", (unsigned)bytes);
        return buf;
    }
    while (v >= 1024 && i + 1 < OOMI_ARRAY_LEN(names)) {
        v /= 1024;
        i++;
    }
    oomi_snprintf(buf, bufsize, v >= 100 ? "%.1f %s" : "%.2f %s", v, names[i]);
    return buf;
}

int oom_budget_make(oom_budget *out, uint64_t target, uint64_t margin)
{
    char t[16], m[16];
    int err;
    if (!out)
        return oomi_fail(OOM_EINVAL, "budget is missing");
    if ((err = oomi_check_version(out->version, OOM_BUDGET_VERSION, "oom_budget")))
        return err;
    if (margin >= target)
        return oomi_fail(OOM_EINVAL, "safety margin %s is not smaller than the target VRAM %s",
                         oom_format_size(m, sizeof(m), margin),
                         oom_format_size(t, sizeof(t), target));
    out->target_bytes = target;
    out->safety_margin_bytes = margin;
    out->usable_bytes = target - margin;
    return OOM_OK;
}

int oom_budget_less_others(oom_budget *b, uint64_t total, uint64_t others)
{
    char t[16], o[16], m[16];
    int err;
    if (!b)
        return oomi_fail(OOM_EINVAL, "budget is missing");
    if ((err = oomi_check_version(b->version, OOM_BUDGET_VERSION, "oom_budget")))
        return err;
    if (others >= total || total - others <= b->safety_margin_bytes)
        return oomi_fail(OOM_ENOFIT,
                         "other processes hold %s of the GPU's %s: no more than the safety "
                         "margin %s is left",
                         oom_format_size(o, sizeof(o), others),
                         oom_format_size(t, sizeof(t), total),
                         oom_format_size(m, sizeof(m), b->safety_margin_bytes));
    if (total - others - b->safety_margin_bytes < b->usable_bytes)
        b->usable_bytes = total - others - b->safety_margin_bytes;
    return OOM_OK;
}
