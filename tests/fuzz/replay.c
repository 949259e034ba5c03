/*
 * replay.c - runs a fuzz target once over files and directories (each file of a directory, not
 * recursing), without libFuzzer: how the committed corpus and the crash regressions are replayed
 * by ctest in every build, gcc included. Exit 0 when every input ran; a failed invariant or a
 * sanitizer report aborts.
 */
#include "fuzz.h"

#include <dirent.h>
#include <string.h>
#include <sys/stat.h>

#pragma weak LLVMFuzzerInitialize

static int run_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    unsigned char *buf = NULL, *p;
    size_t len = 0, cap = 0, n;

    if (!f) {
        perror(path);
        return 1;
    }
    do {
        if (len == cap) {
            cap = cap ? cap * 2 : 4096;
            if (!(p = realloc(buf, cap)))
                abort();
            buf = p;
        }
        n = fread(buf + len, 1, cap - len, f);
        len += n;
    } while (n > 0);
    fclose(f);
    LLVMFuzzerTestOneInput(buf, len);
    free(buf);
    return 0;
}

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int run_path(const char *path, size_t *count)
{
    struct stat st;
    DIR *d;
    struct dirent *e;
    char **names = NULL, full[4096];
    size_t n = 0, i;
    int err = 0;

    if (stat(path, &st) != 0) {
        perror(path);
        return 1;
    }
    if (!S_ISDIR(st.st_mode)) {
        ++*count;
        return run_file(path);
    }
    if (!(d = opendir(path))) {
        perror(path);
        return 1;
    }
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        if (!(names = realloc(names, (n + 1) * sizeof(*names))) || !(names[n] = strdup(e->d_name)))
            abort();
        n++;
    }
    closedir(d);
    qsort(names, n, sizeof(*names), by_name);
    for (i = 0; i < n; i++) {
        snprintf(full, sizeof(full), "%s/%s", path, names[i]);
        if (stat(full, &st) == 0 && S_ISREG(st.st_mode)) {
            ++*count;
            err |= run_file(full);
        }
        free(names[i]);
    }
    free(names);
    return err;
}

int main(int argc, char **argv)
{
    size_t count = 0;
    int i, err = 0;

    if (LLVMFuzzerInitialize)
        LLVMFuzzerInitialize(&argc, &argv);
    for (i = 1; i < argc; i++)
        err |= run_path(argv[i], &count);
    printf("%s: %zu inputs replayed\n", argv[0], count);
    return err || !count;
}
