/* emscripten.h - the one macro web/api/oomless_web.c takes from emscripten, for the native build
 * of the web API that tests/python/test_vocabulary.py runs (web_options). */
#ifndef OOMLESS_TEST_EMSCRIPTEN_H
#define OOMLESS_TEST_EMSCRIPTEN_H
#define EMSCRIPTEN_KEEPALIVE
#endif
