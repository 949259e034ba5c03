/* curl_abi.h - the few names of curl/curl.h that http.c uses, with their values: libcurl's ABI
 * (soname 4), fixed since the options were added. Declared here so that liboomless builds without
 * libcurl's headers and loads libcurl at run time (http.c); tests/unit/test_model.c checks each
 * value against curl/curl.h where that header is installed. Internal to lib/model. */
#ifndef OOMLESS_MODEL_CURL_ABI_H
#define OOMLESS_MODEL_CURL_ABI_H

typedef void oomi_curl; /* CURL */
struct curl_slist;
enum {
    OOMI_CURLE_OK = 0,
    OOMI_CURLE_COULDNT_RESOLVE_HOST = 6,
    OOMI_CURLE_COULDNT_CONNECT = 7,
    OOMI_CURLE_WRITE_ERROR = 23,
    OOMI_CURLE_OPERATION_TIMEDOUT = 28,
    OOMI_CURLE_FILESIZE_EXCEEDED = 63,
};
enum {
    OOMI_CURLOPT_WRITEDATA = 10001,
    OOMI_CURLOPT_URL = 10002,
    OOMI_CURLOPT_ERRORBUFFER = 10010,
    OOMI_CURLOPT_TIMEOUT = 13,
    OOMI_CURLOPT_LOW_SPEED_LIMIT = 19,
    OOMI_CURLOPT_LOW_SPEED_TIME = 20,
    OOMI_CURLOPT_USERAGENT = 10018,
    OOMI_CURLOPT_HTTPHEADER = 10023,
    OOMI_CURLOPT_HEADERDATA = 10029,
    OOMI_CURLOPT_FOLLOWLOCATION = 52,
    OOMI_CURLOPT_SSL_VERIFYPEER = 64,
    OOMI_CURLOPT_MAXREDIRS = 68,
    OOMI_CURLOPT_CONNECTTIMEOUT = 78,
    OOMI_CURLOPT_SSL_VERIFYHOST = 81,
    OOMI_CURLOPT_NOSIGNAL = 99,
    OOMI_CURLOPT_PROTOCOLS = 181,
    OOMI_CURLOPT_REDIR_PROTOCOLS = 182,
    OOMI_CURLOPT_WRITEFUNCTION = 20011,
    OOMI_CURLOPT_HEADERFUNCTION = 20079,
    OOMI_CURLOPT_MAXFILESIZE_LARGE = 30117,
    OOMI_CURLINFO_RESPONSE_CODE = 0x200002,
    OOMI_CURLPROTO_HTTP = 1,
    OOMI_CURLPROTO_HTTPS = 2,
    OOMI_CURL_GLOBAL_DEFAULT = 3,
    OOMI_CURL_ERROR_SIZE = 256,
};

#endif
