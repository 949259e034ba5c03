/*
 * tmpdir.h - where the unit tests put their temporary files: $TMPDIR when it is set (ctest sets a
 * folder of the build tree, which the test tmp.check requires empty once the tests have run),
 * else /tmp. Whatever a test makes there it removes.
 */
#ifndef OOMLESS_TEST_TMPDIR_H
#define OOMLESS_TEST_TMPDIR_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* "$TMPDIR/name" into buf (a name ending in XXXXXX for mkstemp/mkdtemp); returns buf */
static inline char *test_tmp_path(char *buf, size_t size, const char *name)
{
    const char *dir = getenv("TMPDIR");
    snprintf(buf, size, "%s/%s", dir && *dir ? dir : "/tmp", name);
    return buf;
}

/* Writes `text` into a new file "$TMPDIR/oomless-test-XXXXXX"; its path (a static buffer, valid
 * until the next call), or NULL when it could not be written. The caller removes the file. */
static inline char *test_write_tmp(const char *text)
{
    static char path[512];
    size_t n = strlen(text);
    int fd = mkstemp(test_tmp_path(path, sizeof(path), "oomless-test-XXXXXX"));
    if (fd < 0)
        return NULL;
    if (write(fd, text, n) != (ssize_t)n) {
        close(fd);
        unlink(path);
        return NULL;
    }
    close(fd);
    return path;
}

#endif
