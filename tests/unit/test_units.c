/* test_units.c - sizes, margins, budgets. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "oomless.h"

static void size_ok(const char *text, oom_size_unit unit, uint64_t want)
{
    uint64_t got = 0;
    int err = oom_parse_size(&got, text, unit);
    if (err)
        fail_msg("'%s' refused: %s", text, oom_last_message());
    if (got != want)
        fail_msg("'%s' -> %llu, want %llu", text, (unsigned long long)got,
                 (unsigned long long)want);
}

static void size_bad(const char *text)
{
    uint64_t got = 12345;
    assert_int_equal(oom_parse_size(&got, text, OOM_UNIT_GIB), OOM_EINVAL);
    assert_int_equal(got, 12345);
    /* the message quotes the value */
    assert_non_null(strstr(oom_last_message(), text));
}

static void test_sizes(void **state)
{
    (void)state;
    size_ok("24", OOM_UNIT_GIB, 24 * OOM_GiB);
    size_ok("20.5", OOM_UNIT_GIB, 20 * OOM_GiB + 512 * OOM_MiB);
    size_ok("16gb", OOM_UNIT_GIB, 16 * OOM_GiB);
    size_ok("16GiB", OOM_UNIT_GIB, 16 * OOM_GiB);
    size_ok("16 GiB", OOM_UNIT_GIB, 16 * OOM_GiB);
    size_ok("16376MiB", OOM_UNIT_GIB, 16376 * OOM_MiB);
    size_ok("24000M", OOM_UNIT_GIB, 24000 * OOM_MiB);
    size_ok("512MiB", OOM_UNIT_GIB, 512 * OOM_MiB);
    size_ok("512", OOM_UNIT_MIB, 512 * OOM_MiB);
    size_ok("4096B", OOM_UNIT_GIB, 4096);
    size_ok("1.5T", OOM_UNIT_GIB, 1536 * OOM_GiB);
    size_ok("0", OOM_UNIT_GIB, 0);
    size_ok("  8k ", OOM_UNIT_GIB, 8192);
}

static void test_bad_sizes(void **state)
{
    (void)state;
    size_bad("banana");
    size_bad("-3");
    size_bad("1e999");
    size_bad("16 XB");
    size_bad("16GiBs");
    size_bad("nan");
    size_bad("inf");
    size_bad("0x10");
    size_bad("16 16");
    size_bad("99999999999T");
    size_bad("+5");
    assert_int_equal(oom_parse_size(&(uint64_t){0}, "", OOM_UNIT_GIB), OOM_EINVAL);
    assert_non_null(strstr(oom_last_message(), "''"));
}

static void test_margins(void **state)
{
    uint64_t m = 0;
    (void)state;
    assert_int_equal(oom_parse_margin(&m, "512", 24 * OOM_GiB), OOM_OK);
    assert_int_equal(m, 512 * OOM_MiB);
    assert_int_equal(oom_parse_margin(&m, "10%", 20 * OOM_GiB), OOM_OK);
    assert_int_equal(m, 2 * OOM_GiB);
    assert_int_equal(oom_parse_margin(&m, "7.5 %", 8 * OOM_GiB), OOM_OK);
    assert_int_equal(m, 8 * OOM_GiB * 75 / 1000);
    assert_int_equal(oom_parse_margin(&m, "1GiB", 8 * OOM_GiB), OOM_OK);
    assert_int_equal(m, OOM_GiB);
    assert_int_equal(oom_parse_margin(&m, "100%", 8 * OOM_GiB), OOM_EINVAL);
    assert_int_equal(oom_parse_margin(&m, "-1%", 8 * OOM_GiB), OOM_EINVAL);
    assert_int_equal(oom_parse_margin(&m, "lots", 8 * OOM_GiB), OOM_EINVAL);
    assert_non_null(strstr(oom_last_message(), "lots"));
}

/* a decimal comma (de_DE, fr_FR) is named as such, not as an unknown unit or a bad number */
static void comma_bad(int err, const char *text)
{
    assert_int_equal(err, OOM_EINVAL);
    assert_non_null(strstr(oom_last_message(), text));
    assert_non_null(strstr(oom_last_message(), "write the decimal separator as '.'"));
}

static void test_decimal_comma(void **state)
{
    uint64_t v = 0;
    (void)state;
    comma_bad(oom_parse_size(&v, "20,5", OOM_UNIT_GIB), "size '20,5' has a comma");
    comma_bad(oom_parse_size(&v, "20,5GiB", OOM_UNIT_GIB), "'20,5GiB'");
    comma_bad(oom_parse_size(&v, " 1,5 TiB", OOM_UNIT_GIB), "' 1,5 TiB'");
    comma_bad(oom_parse_margin(&v, "10,5%", 8 * OOM_GiB), "safety margin '10,5%'");
    comma_bad(oom_parse_margin(&v, "1,5GiB", 8 * OOM_GiB), "safety margin '1,5GiB'");
    /* not a number with a comma: the usual messages */
    assert_int_equal(oom_parse_size(&v, "20x", OOM_UNIT_GIB), OOM_EINVAL);
    assert_non_null(strstr(oom_last_message(), "unknown unit"));
    assert_int_equal(oom_parse_size(&v, ",5", OOM_UNIT_GIB), OOM_EINVAL);
    assert_non_null(strstr(oom_last_message(), "is not a size"));
    assert_int_equal(oom_parse_size(&v, "20,", OOM_UNIT_GIB), OOM_EINVAL);
    assert_null(strstr(oom_last_message(), "comma"));
}

static void test_budget(void **state)
{
    oom_budget b = OOM_BUDGET_INIT;
    (void)state;
    assert_int_equal(oom_budget_make(&b, 20 * OOM_GiB + 512 * OOM_MiB, 512 * OOM_MiB), OOM_OK);
    assert_int_equal(b.usable_bytes, 20 * OOM_GiB);
    assert_int_equal(oom_budget_make(&b, OOM_GiB, OOM_GiB), OOM_EINVAL);
}

/* usable = min(target - margin, total - others - margin) */
static void test_budget_less_others(void **state)
{
    oom_budget b = OOM_BUDGET_INIT;
    (void)state;
    /* the whole 80 GiB card, 10 GiB held by others: 80 - 10 - 1 */
    assert_int_equal(oom_budget_make(&b, 80 * OOM_GiB, OOM_GiB), OOM_OK);
    assert_int_equal(oom_budget_less_others(&b, 80 * OOM_GiB, 10 * OOM_GiB), OOM_OK);
    assert_int_equal(b.usable_bytes, 69 * OOM_GiB);
    assert_int_equal(b.target_bytes, 80 * OOM_GiB); /* target and margin kept */
    assert_int_equal(b.safety_margin_bytes, OOM_GiB);
    /* --vram 24 on the same card: 24 - 1 is smaller than 80 - 10 - 1, kept */
    assert_int_equal(oom_budget_make(&b, 24 * OOM_GiB, OOM_GiB), OOM_OK);
    assert_int_equal(oom_budget_less_others(&b, 80 * OOM_GiB, 10 * OOM_GiB), OOM_OK);
    assert_int_equal(b.usable_bytes, 23 * OOM_GiB);
    /* --vram 75: others leave 80 - 10 - 1 = 69 */
    assert_int_equal(oom_budget_make(&b, 75 * OOM_GiB, OOM_GiB), OOM_OK);
    assert_int_equal(oom_budget_less_others(&b, 80 * OOM_GiB, 10 * OOM_GiB), OOM_OK);
    assert_int_equal(b.usable_bytes, 69 * OOM_GiB);
    /* nothing held: unchanged */
    assert_int_equal(oom_budget_less_others(&b, 80 * OOM_GiB, 0), OOM_OK);
    assert_int_equal(b.usable_bytes, 69 * OOM_GiB);
    /* others leave only the margin: nothing fits, the message gives the sizes */
    assert_int_equal(oom_budget_make(&b, 8 * OOM_GiB, OOM_GiB), OOM_OK);
    assert_int_equal(oom_budget_less_others(&b, 8 * OOM_GiB, 7 * OOM_GiB), OOM_ENOFIT);
    assert_non_null(strstr(oom_last_message(), "7.00 GiB"));
    assert_int_equal(oom_budget_less_others(&b, 8 * OOM_GiB, 9 * OOM_GiB), OOM_ENOFIT);
    assert_int_equal(oom_budget_less_others(NULL, 8 * OOM_GiB, 0), OOM_EINVAL);
}

static void test_format(void **state)
{
    char buf[16];
    (void)state;
    assert_string_equal(oom_format_size(buf, sizeof buf, 23 * OOM_GiB), "23.00 GiB");
    assert_string_equal(oom_format_size(buf, sizeof buf, 512 * OOM_MiB), "512.0 MiB");
    assert_string_equal(oom_format_size(buf, sizeof buf, 900), "900 B");
    assert_string_equal(oom_format_size(buf, sizeof buf, UINT64_MAX), "16.00 EiB");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sizes),   cmocka_unit_test(test_bad_sizes),
        cmocka_unit_test(test_margins), cmocka_unit_test(test_decimal_comma),
        cmocka_unit_test(test_budget),  cmocka_unit_test(test_budget_less_others),
        cmocka_unit_test(test_format),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
