/*
 * tmpdir.h - where the unit tests put their temporary files: $TMPDIR when it is set (ctest sets a
 * folder of the build tree, which the test tmp.check requires empty once the tests have run),
 * else /tmp. Whatever a test makes there it removes.
 */
#ifndef OOMLESS_TEST_TMPDIR_H
#define OOMLESS_TEST_TMPDIR_H

#include <stdio.h>
#include <stdlib.h>

/* "$TMPDIR/name" into buf (a name ending in XXXXXX for mkstemp/mkdtemp); returns buf */
static inline char *test_tmp_path(char *buf, size_t size, const char *name)
{
    const char *dir = getenv("TMPDIR");
    snprintf(buf, size, "%s/%s", dir && *dir ? dir : "/tmp", name);
    return buf;
}

#endif
