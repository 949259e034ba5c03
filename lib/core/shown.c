/*
 * shown.c - text that another process chose (a command line, a process or user name, a line of
 * an events file), made safe to show on a terminal or to keep in a log that `tail -f` or `cat`
 * will show: escape sequences in it (OSC 52 writing the clipboard, a window title, a screen
 * clear, a cursor move that paints over other lines) must reach the reader as text.
 *
 * Kept as they are: printable ASCII (0x20-0x7e) and well-formed UTF-8 for U+00A0 and above.
 * Written as \xHH, byte by byte: the C0 controls (0x00-0x1f, ESC and BEL among them), DEL (0x7f),
 * the C1 controls U+0080-U+009F (CSI, OSC, DCS... which a terminal may take encoded in UTF-8 as
 * well as in one byte), the bidirectional formatting characters that reorder what is shown
 * around them (U+200E, U+200F, U+202A-U+202E, U+2066-U+2069: "Trojan Source", CVE-2021-42574),
 * and every byte of a sequence that is not UTF-8 (a stray continuation byte, a truncated
 * sequence, an overlong form, a surrogate, a code point past U+10FFFF: RFC 3629).
 */
#include "core/core.h"

#include <json-c/json.h>
#include <string.h>

/* The length of the well-formed UTF-8 sequence at s[0..n) and its code point, or 0. */
static size_t utf8_seq(const unsigned char *s, size_t n, unsigned long *cp)
{
    size_t len, i;
    unsigned long c, min;

    if (s[0] >= 0xc2 && s[0] <= 0xdf)
        len = 2, c = s[0] & 0x1f, min = 0x80;
    else if (s[0] >= 0xe0 && s[0] <= 0xef)
        len = 3, c = s[0] & 0x0f, min = 0x800;
    else if (s[0] >= 0xf0 && s[0] <= 0xf4)
        len = 4, c = s[0] & 0x07, min = 0x10000;
    else
        return 0; /* ASCII is not a sequence here; 0x80-0xc1, 0xf5-0xff never start one */
    if (n < len)
        return 0;
    for (i = 1; i < len; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return 0;
        c = c << 6 | (s[i] & 0x3f);
    }
    if (c < min || c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff))
        return 0;
    *cp = c;
    return len;
}

/* A code point that is shown as text (not a C1 control, not a bidirectional format char). */
static int shown_as_is(unsigned long c)
{
    return !(c <= 0x9f || c == 0x200e || c == 0x200f || (c >= 0x202a && c <= 0x202e) ||
             (c >= 0x2066 && c <= 0x2069));
}

void oomi_sb_put_shown(oomi_sb *sb, const char *text, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    const unsigned char *s = (const unsigned char *)text;
    size_t i = 0, run = 0, len, k;
    unsigned long c;

    while (i < n) {
        if (s[i] >= 0x20 && s[i] < 0x7f) {
            i++;
            continue;
        }
        len = s[i] >= 0x80 ? utf8_seq(s + i, n - i, &c) : 0;
        if (len && shown_as_is(c)) {
            i += len;
            continue;
        }
        oomi_sb_add(sb, text + run, i - run); /* what came before, as it is */
        for (k = 0; k < (len ? len : 1); k++) {
            char esc[4] = {'\\', 'x', hex[s[i + k] >> 4], hex[s[i + k] & 0xf]};
            oomi_sb_add(sb, esc, sizeof(esc));
        }
        i += len ? len : 1;
        run = i;
    }
    oomi_sb_add(sb, text + run, n - run);
}

char *oomi_shown(const char *text)
{
    oomi_sb sb = OOMI_SB_INIT;
    char *out;
    if (text)
        oomi_sb_put_shown(&sb, text, strlen(text));
    return oomi_sb_finish(&sb, &out) ? NULL : out;
}

char *oomi_utf8_clean(const char *text)
{
    static const char replacement[] = "\xef\xbf\xbd"; /* U+FFFD */
    const unsigned char *s = (const unsigned char *)text;
    oomi_sb sb = OOMI_SB_INIT;
    size_t i = 0, run = 0, n = text ? strlen(text) : 0, len;
    unsigned long c;
    char *out;

    while (i < n) {
        if (s[i] < 0x80) {
            i++;
            continue;
        }
        if ((len = utf8_seq(s + i, n - i, &c))) {
            i += len;
            continue;
        }
        oomi_sb_add(&sb, text + run, i - run);
        oomi_sb_add(&sb, replacement, sizeof(replacement) - 1);
        run = ++i;
    }
    oomi_sb_add(&sb, text ? text + run : "", n - run);
    return oomi_sb_finish(&sb, &out) ? NULL : out;
}

struct json_object *oomi_json_text(const char *text)
{
    char *clean;
    json_object *o;
    if (!text || !*text || !(clean = oomi_utf8_clean(text)))
        return NULL;
    o = json_object_new_string(clean);
    oomi_free(clean);
    return o;
}
