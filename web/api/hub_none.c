/*
 * hub_none.c - the Hugging Face Hub client of the WebAssembly build: the module has no network
 * and no Hub cache (the page fetches a Hub model's config.json itself, in app.js, and hands it
 * over as a file), so a Hub id is looked up no further than the presets, as the native library
 * does with no cache to write into. Linked in place of lib/model/hub.c and lib/model/http.c
 * (web/CMakeLists.txt).
 */
#include "model/model.h"

bool oomi_hub_offline(void)
{
    return true;
}

int oomi_hub_cache(char **out)
{
    *out = NULL;
    return OOM_OK;
}

int oomi_hub_fetch(char **out, const char *repo, const char *id, const char *revision)
{
    (void)repo, (void)revision;
    *out = NULL;
    return oomi_fail(OOM_EIO, "the page fetches '%s' itself: type it into the Hub field", id);
}
