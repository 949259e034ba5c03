/* test_model.c - lib/model's Hub client: the values of curl/curl.h it declares itself
 * (curl_abi.h, libcurl being loaded at run time) against the header, where it is installed
 * (scripts/install-deps.sh installs libcurl4-openssl-dev for the tests); the Hub cache's
 * place from the environment, as huggingface_hub finds it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "model/model.h"

#include "model/curl_abi.h"

#if defined(__has_include)
#if __has_include(<curl/curl.h>)
/* http.c uses the bitmask CURLOPT_PROTOCOLS, which every libcurl 7 and 8 takes (the _STR form
 * needs 7.85); the header marks it deprecated */
#define CURL_DISABLE_DEPRECATION 1
#include <curl/curl.h>
#define HAVE_CURL_H 1
#endif
#endif

static void test_curl_abi(void **state)
{
    (void)state;
#ifdef HAVE_CURL_H
    assert_int_equal(OOMI_CURLE_OK, CURLE_OK);
    assert_int_equal(OOMI_CURLE_COULDNT_RESOLVE_HOST, CURLE_COULDNT_RESOLVE_HOST);
    assert_int_equal(OOMI_CURLE_COULDNT_CONNECT, CURLE_COULDNT_CONNECT);
    assert_int_equal(OOMI_CURLE_WRITE_ERROR, CURLE_WRITE_ERROR);
    assert_int_equal(OOMI_CURLE_OPERATION_TIMEDOUT, CURLE_OPERATION_TIMEDOUT);
    assert_int_equal(OOMI_CURLE_FILESIZE_EXCEEDED, CURLE_FILESIZE_EXCEEDED);
    assert_int_equal(OOMI_CURLOPT_WRITEDATA, CURLOPT_WRITEDATA);
    assert_int_equal(OOMI_CURLOPT_URL, CURLOPT_URL);
    assert_int_equal(OOMI_CURLOPT_ERRORBUFFER, CURLOPT_ERRORBUFFER);
    assert_int_equal(OOMI_CURLOPT_TIMEOUT, CURLOPT_TIMEOUT);
    assert_int_equal(OOMI_CURLOPT_LOW_SPEED_LIMIT, CURLOPT_LOW_SPEED_LIMIT);
    assert_int_equal(OOMI_CURLOPT_LOW_SPEED_TIME, CURLOPT_LOW_SPEED_TIME);
    assert_int_equal(OOMI_CURLOPT_USERAGENT, CURLOPT_USERAGENT);
    assert_int_equal(OOMI_CURLOPT_HTTPHEADER, CURLOPT_HTTPHEADER);
    assert_int_equal(OOMI_CURLOPT_HEADERDATA, CURLOPT_HEADERDATA);
    assert_int_equal(OOMI_CURLOPT_FOLLOWLOCATION, CURLOPT_FOLLOWLOCATION);
    assert_int_equal(OOMI_CURLOPT_SSL_VERIFYPEER, CURLOPT_SSL_VERIFYPEER);
    assert_int_equal(OOMI_CURLOPT_MAXREDIRS, CURLOPT_MAXREDIRS);
    assert_int_equal(OOMI_CURLOPT_CONNECTTIMEOUT, CURLOPT_CONNECTTIMEOUT);
    assert_int_equal(OOMI_CURLOPT_SSL_VERIFYHOST, CURLOPT_SSL_VERIFYHOST);
    assert_int_equal(OOMI_CURLOPT_NOSIGNAL, CURLOPT_NOSIGNAL);
    assert_int_equal(OOMI_CURLOPT_PROTOCOLS, CURLOPT_PROTOCOLS);
    assert_int_equal(OOMI_CURLOPT_REDIR_PROTOCOLS, CURLOPT_REDIR_PROTOCOLS);
    assert_int_equal(OOMI_CURLOPT_WRITEFUNCTION, CURLOPT_WRITEFUNCTION);
    assert_int_equal(OOMI_CURLOPT_HEADERFUNCTION, CURLOPT_HEADERFUNCTION);
    assert_int_equal(OOMI_CURLOPT_MAXFILESIZE_LARGE, CURLOPT_MAXFILESIZE_LARGE);
    assert_int_equal(OOMI_CURLINFO_RESPONSE_CODE, CURLINFO_RESPONSE_CODE);
    assert_int_equal(OOMI_CURLPROTO_HTTP, CURLPROTO_HTTP);
    assert_int_equal(OOMI_CURLPROTO_HTTPS, CURLPROTO_HTTPS);
    assert_int_equal(OOMI_CURL_GLOBAL_DEFAULT, CURL_GLOBAL_DEFAULT);
    assert_int_equal(OOMI_CURL_ERROR_SIZE, CURL_ERROR_SIZE);
#else
    skip();
#endif
}

static void cache_is(const char *want)
{
    char *got = NULL;
    assert_int_equal(oomi_hub_cache(&got), OOM_OK);
    if (!want) {
        assert_null(got);
        return;
    }
    assert_non_null(got);
    assert_string_equal(got, want);
    oomi_free(got);
}

/* $HF_HUB_CACHE, else $HF_HOME/hub, else $XDG_CACHE_HOME/huggingface/hub, else
 * ~/.cache/huggingface/hub (huggingface_hub/constants.py) */
static void test_cache_place(void **state)
{
    (void)state;
    setenv("HF_HUB_CACHE", "/a/hub", 1);
    setenv("HF_HOME", "/b", 1);
    setenv("XDG_CACHE_HOME", "/c", 1);
    setenv("HOME", "/d", 1);
    cache_is("/a/hub");
    unsetenv("HF_HUB_CACHE");
    cache_is("/b/hub");
    unsetenv("HF_HOME");
    cache_is("/c/huggingface/hub");
    unsetenv("XDG_CACHE_HOME");
    cache_is("/d/.cache/huggingface/hub");
}

/* HF_HUB_OFFLINE as huggingface_hub reads a boolean: 1, ON, YES, TRUE in any case */
static void test_offline(void **state)
{
    const char *yes[] = {"1", "ON", "yes", "True"}, *no[] = {"0", "off", "", "no", "2"};
    size_t i;
    (void)state;
    for (i = 0; i < sizeof(yes) / sizeof(*yes); i++) {
        setenv("HF_HUB_OFFLINE", yes[i], 1);
        assert_true(oomi_hub_offline());
    }
    for (i = 0; i < sizeof(no) / sizeof(*no); i++) {
        setenv("HF_HUB_OFFLINE", no[i], 1);
        assert_false(oomi_hub_offline());
    }
    unsetenv("HF_HUB_OFFLINE");
    assert_false(oomi_hub_offline());
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_curl_abi),
        cmocka_unit_test(test_cache_place),
        cmocka_unit_test(test_offline),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
