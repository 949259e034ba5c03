/* budget.c - the smallest C program using liboomless: the usable memory of a named GPU.
 *
 *   cc budget.c $(pkg-config --cflags --libs oomless) -o budget && ./budget a100-80gb
 */
#include <oomless.h>
#include <stdio.h>

int main(int argc, char **argv)
{
    oom_catalog *catalog = NULL;
    oom_target target = OOM_TARGET_INIT; /* every struct starts at its version */
    oom_target_request request = OOM_TARGET_REQUEST_INIT;
    char size[16];
    int err;

    request.gpu = argc > 1 ? argv[1] : "auto";
    if ((err = oom_catalog_load(&catalog, NULL)) ||
        (err = oom_target_resolve(&target, &request, catalog))) {
        fprintf(stderr, "budget: %s\n", oom_last_message());
        oom_catalog_free(catalog);
        return 1;
    }
    printf("%s: %s usable\n", target.profile.id,
           oom_format_size(size, sizeof(size), target.budget.usable_bytes));
    oom_target_dispose(&target); /* frees what the target owns */
    oom_catalog_free(catalog);
    return 0;
}
