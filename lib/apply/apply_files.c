/* apply_files.c - the files of a run: named once each, opened and locked in one order, read;
 * the replacements and backups staged beside them, checked unchanged and renamed into place;
 * temporary files removed and locks released (the locking and staging: apply_run.c's head). */
#include "apply/apply.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* no two names of one file in a run: each would be edited from the old text (and locked
 * twice, waiting for itself). f->st gets what stat() says of the file (when it can). */
static int check_distinct(const oom_apply *a, struct file *f)
{
    size_t i;

    if (stat(f->real, &f->st) < 0)
        return OOM_OK; /* the open that follows says why */
    for (i = 0; i < a->nfiles && &a->files[i] != f; i++)
        if (a->files[i].st.st_dev == f->st.st_dev && a->files[i].st.st_ino == f->st.st_ino)
            return oomi_fail(OOM_EINVAL, "'%s' and '%s' are the same file; name it once",
                             a->files[i].name, f->name);
    return OOM_OK;
}

static int name_file(oom_apply *a, struct file *f, const char *name, unsigned flags)
{
    int err;

    f->fd = -1;
    if (!(f->name = oomi_strdup(name)))
        return oomi_nomem();
    if ((err = oomi_resolve_target(&f->real, name, (flags & OOM_APPLY_FOLLOW_SYMLINKS) != 0)))
        return err;
    return check_distinct(a, f);
}

/* opened (locked unless a dry run: that writes nothing and waits for nobody) and read */
static int read_file(oom_apply *a, struct file *f, unsigned flags)
{
    bool dry = (flags & OOM_APPLY_DRY_RUN) != 0;
    int err;

    if ((err = oomi_open_locked(&f->fd, &f->st, f->real, dry ? -1 : a->lock_ms)))
        return err;
    if (!dry && a->hook)
        a->hook("locked", f->name, a->user);
    if (!dry && f->st.st_nlink > 1)
        return oomi_fail(OOM_EREFUSED,
                         "'%s' has %lu hard links: a new file renamed over this name would "
                         "leave the other names with the old text; edit it by hand, or give it "
                         "a copy of its own first; the file is unchanged",
                         f->name, (unsigned long)f->st.st_nlink);
    /* write-protected: no write bit at all (root may write anything), or none for us */
    if (!dry && !(flags & OOM_APPLY_FORCE) &&
        (!(f->st.st_mode & 0222) ||
         (faccessat(AT_FDCWD, f->real, W_OK, AT_EACCESS) && errno == EACCES)))
        return oomi_fail(OOM_EREFUSED,
                         "'%s' is write-protected (mode %04o): not replacing it; make it "
                         "writable, or give --force (the new file keeps the mode); the file is "
                         "unchanged",
                         f->name, (unsigned)(f->st.st_mode & 07777));
    return oomi_read_fd(&f->old, &f->oldlen, f->fd, f->real, OOMI_READ_MAX);
}

/* Files are locked in the order of their device and inode numbers, whatever the order on the
 * command line: two runs locking a.yaml b.yaml and b.yaml a.yaml cannot wait for each other. */
static bool before(const struct stat *a, const struct stat *b)
{
    return a->st_dev != b->st_dev ? a->st_dev < b->st_dev : a->st_ino < b->st_ino;
}

int oomi_apply_read_files(oom_apply *a, const char *const *files, size_t count, unsigned flags)
{
    size_t i, *order = oomi_calloc(count, sizeof(*order));
    int err = OOM_OK;

    if (!order)
        return oomi_nomem();
    for (i = 0; !err && i < count; i++) {
        a->nfiles++;
        err = name_file(a, &a->files[i], files[i], flags);
        order[i] = i;
    }
    for (i = 1; !err && i < count; i++) { /* insertion sort: a handful of files */
        size_t j, k = order[i];
        for (j = i; j > 0 && before(&a->files[k].st, &a->files[order[j - 1]].st); j--)
            order[j] = order[j - 1];
        order[j] = k;
    }
    for (i = 0; !err && i < count; i++)
        err = read_file(a, &a->files[order[i]], flags);
    oomi_free(order);
    return err;
}

/* FILE + suffix, unless that is a directory or another file of this run */
static int backup_name(oom_apply *a, struct file *f)
{
    struct stat st;
    size_t i;

    if (!(f->backup = oomi_asprintf("%s%s", f->real, a->suffix)))
        return oomi_nomem();
    if (lstat(f->backup, &st) < 0)
        return OOM_OK;
    if (S_ISDIR(st.st_mode))
        return oomi_fail(OOM_EIO,
                         "cannot write the backup of '%s': '%s' is a directory; the "
                         "file is unchanged",
                         f->name, f->backup);
    for (i = 0; i < a->nfiles; i++)
        if (a->files[i].st.st_dev == st.st_dev && a->files[i].st.st_ino == st.st_ino)
            return oomi_fail(OOM_EINVAL,
                             "the backup of '%s' would replace '%s', which this run edits too "
                             "(choose another --backup-suffix)",
                             f->name, a->files[i].name);
    return OOM_OK;
}

/* the replacements, then the new backups, written and synced under temporary names (the
 * replacements first: a file that cannot be replaced is named as such in the message) */
static int stage(oom_apply *a)
{
    size_t i;
    int err;

    for (i = 0; a->hook && i < a->nfiles; i++)
        if (oomi_apply_changed(&a->files[i]))
            a->hook("prepared", a->files[i].name, a->user);
    for (i = 0; i < a->nfiles; i++) {
        struct file *f = &a->files[i];
        if (oomi_apply_changed(f) &&
            (err = oomi_write_temp(&f->tmp, f->real, f->fd, oomi_apply_text(f), f->len, a->hook,
                                   a->user)))
            return err; /* oomi_apply_finish_files() unlinks the ones already made */
    }
    for (i = 0; i < a->nfiles; i++) {
        struct file *f = &a->files[i];
        if (!oomi_apply_changed(f) || !a->suffix)
            continue;
        if ((err = backup_name(a, f)))
            return err;
        if ((err = oomi_write_temp(&f->btmp, f->backup, f->fd, f->old, f->oldlen, NULL, NULL)))
            return oomi_fail_prefix(err, "backup '%s': ", f->backup);
        if (a->hook)
            a->hook("backup-written", f->name, a->user);
    }
    return OOM_OK;
}

/* the renames: the file (it is new from here on), then its backup. Nothing is allocated here. */
static int commit(oom_apply *a, struct file *f)
{
    int err;

    if ((err = oomi_rename_temp(f->tmp, f->real, a->hook, a->user)))
        return err;
    oomi_free(f->tmp);
    f->tmp = NULL;
    a->written = true;
    if (f->btmp) {
        if (rename(f->btmp, f->backup) < 0) {
            err = oomi_fail(OOM_EIO,
                            "'%s' was written, but its backup could not be renamed into place "
                            "(%s): the old text is in '%s'",
                            f->name, strerror(errno), f->btmp);
            oomi_free(f->btmp); /* kept on disk: it holds the only copy of the old text */
            f->btmp = NULL;
            return err;
        }
        oomi_free(f->btmp);
        f->btmp = NULL;
        if (a->hook)
            a->hook("backup-renamed", f->name, a->user);
    }
    if ((err = oomi_sync_dir(f->real)))
        return err;
    if (a->hook)
        a->hook("dir-synced", f->name, a->user);
    return OOM_OK;
}

int oomi_apply_write_files(oom_apply *a)
{
    size_t i;
    int err;

    if ((err = stage(a)))
        return err;
    /* nobody wrote the files since they were read (programs that do not lock) */
    for (i = 0; i < a->nfiles; i++)
        if (a->files[i].tmp &&
            (err = oomi_check_unchanged(a->files[i].fd, &a->files[i].st, a->files[i].real)))
            return err;
    for (i = 0; i < a->nfiles; i++)
        if (a->files[i].tmp && (err = commit(a, &a->files[i])))
            return err;
    return OOM_OK;
}

/* temporary files removed, locks released */
void oomi_apply_finish_files(oom_apply *a)
{
    size_t i;

    for (i = 0; i < a->nfiles; i++) {
        struct file *f = &a->files[i];
        if (f->tmp)
            unlink(f->tmp);
        if (f->btmp)
            unlink(f->btmp);
        oomi_free(f->tmp);
        oomi_free(f->btmp);
        f->tmp = f->btmp = NULL;
        if (f->fd >= 0)
            close(f->fd);
        f->fd = -1;
    }
}
