/*
 * core/core.h - the bottom layer: errors, allocation, strings, files, numbers, YAML
 * loading, JSON output helpers, diffs and safe writes. Internal names start with oomi_ (public
 * ones with oom_); the version script exports only oom_*. Uses nothing of the other folders.
 */
#ifndef OOMLESS_CORE_CORE_H
#define OOMLESS_CORE_CORE_H

#include "oomless.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#if defined(__GNUC__)
#define OOMI_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define OOMI_PRINTF(f, a)
#endif

#define OOMI_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

/* ---- errors (error.c) ---------------------------------------------------------------------
 * oomi_fail() records code + message for oom_last_message() and returns the code, so that
 *     return oomi_fail(OOM_EINVAL, "size '%s' is not a number", text);
 * is the whole error path. oomi_fail_keep() returns the code of a failure already recorded by a
 * callee, optionally prefixing context ("model 'x.json': ").
 */
int oomi_fail(int code, const char *fmt, ...) OOMI_PRINTF(2, 3);
int oomi_failv(int code, const char *fmt, va_list ap) OOMI_PRINTF(2, 0);
int oomi_fail_prefix(int code, const char *fmt, ...) OOMI_PRINTF(2, 3);
int oomi_nomem(void);
/* OOM_OK when `version` of the public struct `name` is one this library knows (1 to `known`),
 * else OOM_EINVAL with a message naming the struct and the version (version.c). */
int oomi_check_version(unsigned int version, unsigned int known, const char *name);
void oomi_clear_error(void);
/* Hands a notice (not a failure: a damaged line skipped, a variable ignored) to the handler
 * set with oom_set_notice_handler(); dropped when there is none. Never touches the error. */
void oomi_notice(const char *fmt, ...) OOMI_PRINTF(1, 2);

/* ---- numbers as text, in the C locale (clocale.c) -----------------------------------------
 * Whatever locale the host program set ("de_DE.UTF-8" writes 20,5): every number lib/ reads or
 * writes goes through these ('.' always). scripts/check-c-locale.py rejects strtod, snprintf,
 * vsnprintf, tolower, strcasecmp... called anywhere else in lib/. */
double oomi_strtod(const char *text, char **end);
int oomi_snprintf(char *buf, size_t size, const char *fmt, ...) OOMI_PRINTF(3, 4);
int oomi_vsnprintf(char *buf, size_t size, const char *fmt, va_list ap) OOMI_PRINTF(3, 0);
/* ASCII letters and case, not the host's (tr_TR: tolower('I') is not 'i'); for an unsigned char
 * value or EOF, as <ctype.h> */
int oomi_tolower(int c);
int oomi_toupper(int c);
int oomi_isupper(int c);
int oomi_isalpha(int c);
int oomi_isalnum(int c);
int oomi_strcasecmp(const char *a, const char *b);
int oomi_strncasecmp(const char *a, const char *b, size_t n);

/* ---- memory (alloc.c): every allocation of the library goes through these --------------- */
void *oomi_malloc(size_t n);
void *oomi_calloc(size_t count, size_t size);
void *oomi_realloc(void *p, size_t n);
/* realloc of an array with overflow check; NULL (with p untouched) on failure */
void *oomi_reallocarray(void *p, size_t count, size_t size);
char *oomi_strdup(const char *s);
char *oomi_strndup(const char *s, size_t n);
void oomi_free(void *p);
char *oomi_asprintf(const char *fmt, ...) OOMI_PRINTF(1, 2);
char *oomi_vasprintf(const char *fmt, va_list ap) OOMI_PRINTF(1, 0);
/* An owned list of owned strings (char **v of *n): appends one printf-formatted string (OOM_OK,
 * or OOM_ENOMEM recorded, the list unchanged); frees all of it and resets v and n. */
int oomi_strv_add(char ***v, size_t *n, const char *fmt, ...) OOMI_PRINTF(3, 4);
int oomi_strv_addv(char ***v, size_t *n, const char *fmt, va_list ap) OOMI_PRINTF(3, 0);
void oomi_strv_free(char ***v, size_t *n);

/* ---- growable string (strbuf.c) -----------------------------------------------------------
 * A failed append latches `failed`; check once with oomi_sb_ok() at the end. */
typedef struct oomi_sb {
    char *buf;
    size_t len, cap;
    bool failed;
} oomi_sb;

#define OOMI_SB_INIT                                                                               \
    {                                                                                              \
        NULL, 0, 0, false                                                                          \
    }
void oomi_sb_add(oomi_sb *sb, const char *s, size_t n);
void oomi_sb_puts(oomi_sb *sb, const char *s);
void oomi_sb_putc(oomi_sb *sb, char c);
void oomi_sb_printf(oomi_sb *sb, const char *fmt, ...) OOMI_PRINTF(2, 3);
/* OOM_OK, or OOM_ENOMEM (recorded) if any append failed */
int oomi_sb_ok(oomi_sb *sb);
/* hands the buffer over (never NULL on success: "" for an empty buffer) and resets sb */
char *oomi_sb_steal(oomi_sb *sb);
/* The end of every string built so: *out gets the buffer (OOM_OK), or NULL with the buffer freed
 * and OOM_ENOMEM recorded when an append (or the final allocation) failed. */
int oomi_sb_finish(oomi_sb *sb, char **out);
void oomi_sb_free(oomi_sb *sb);

/* ---- text another process chose, made safe to show (shown.c) ------------------------------
 * A command line, a process or user name, an events file's text: every C0 control, DEL, C1
 * control (a byte, or U+0080-U+009F in UTF-8), bidirectional formatting character and byte of
 * invalid UTF-8 becomes \xHH, so that no escape sequence in it reaches a terminal or a log; the
 * rest (printable ASCII, UTF-8 text) is kept. The one escaping of every surface: watch's text,
 * view and CSV log, the events watch shows. JSON needs none (json-c escapes controls itself). */
void oomi_sb_put_shown(oomi_sb *sb, const char *s, size_t n);
/* The same, allocated (NULL: OOM_ENOMEM recorded); NULL text gives "". */
char *oomi_shown(const char *s);
/* Such text for a JSON document: json-c escapes the controls but passes bytes of 0x80 and above
 * through, so every byte of a sequence that is not UTF-8 (as above) becomes U+FFFD, keeping the
 * document valid for strict parsers (RFC 8259, 8.1). oomi_utf8_clean: allocated, NULL text
 * gives "" (NULL: OOM_ENOMEM recorded); oomi_json_text: a string, NULL for NULL or "" (as
 * oomi_json_string_or_null). */
char *oomi_utf8_clean(const char *s);
struct json_object *oomi_json_text(const char *s);

/* ---- files and data (file.c) --------------------------------------------------------------
 * The one reader of whole files. A file of more than `max` bytes is refused with OOM_EINVAL
 * ("PATH: 70.1 MiB is larger than the 64 MiB this reads") before anything is allocated for it
 * (a pipe: once more than `max` came); documents (plans, configs, models, presets) are read
 * with OOMI_READ_MAX. */
#define OOMI_READ_MAX ((size_t)64 * 1024 * 1024)
/* Reads an open file descriptor from its current offset (NUL-terminated, *len without the NUL);
 * `path` names it in messages. A regular file is read into one allocation of its size. OOM_EIO
 * names the path + errno. */
int oomi_read_fd(char **out, size_t *len, int fd, const char *path, size_t max);
/* The same for the file at `path`. */
int oomi_read_file(char **out, size_t *len, const char *path, size_t max);
/* Reads the first size-1 bytes (at most) of the file at `path` into buf, NUL-terminated, without
 * allocating: the /proc files read in every sample, where what does not fit is cut, not refused.
 * Returns the length read, or -1 (errno set) when the file cannot be opened or nothing could be
 * read. */
long oomi_read_prefix(const char *path, char *buf, size_t size);
/* 3 when text[0..len) starts with the UTF-8 byte order mark (EF BB BF, which Windows editors
 * write at the start of a file), else 0: every reader of a JSON or YAML file skips it. */
size_t oomi_bom_len(const char *text, size_t len);
/* What a file that is not a regular one is, from its st_mode: "a FIFO", "a directory", "a
 * character device", "a block device", "a socket" (else "not a regular file"), for messages
 * such as "'x' is a FIFO, not a regular file". */
const char *oomi_file_kind(unsigned int mode);
/* A descriptor the library keeps open, moved above 2 when it landed on 0-2 (the caller runs
 * with a standard descriptor closed: what the caller, or a job's copied output, writes there
 * must not reach the library's file). Close-on-exec. Returns the descriptor (fd itself when
 * above 2), or -1 with errno (fd closed). */
int oomi_fd_above_std(int fd);
/* The data directory: $OOMLESS_DATA_DIR, else the installed one, else the source tree's. */
const char *oomi_data_dir(void);
/* "<data dir>/<relative>", allocated */
char *oomi_data_path(const char *relative);

/* The base directory of an XDG kind: $`var` ("XDG_CACHE_HOME") when it is an absolute path (a
 * relative one is ignored, with a notice, as the XDG Base Directory spec says), else
 * $HOME/`fallback` (".cache"). *out is NULL (OOM_OK) when neither is usable. *home_len (may be
 * NULL) gets the length of the leading $HOME, which callers must not create (0 for $`var`). */
int oomi_xdg_base(char **out, size_t *home_len, const char *var, const char *fallback);

/* ---- plan documents (plandoc.c) ------------------------------------------------------------
 * What `run --plan` and `watch --plan` take from a plan document (`oomless plan --json`): the
 * one reader of plans for both. `want` names what the caller needs; each named part must be
 * there, and each value found is range-checked. */
enum { OOMI_PLAN_BATCH = 1, OOMI_PLAN_PEAK = 2 };
typedef struct oomi_plan_doc {
    int batch_size;       /* .plan.batch_size (>= 1) with OOMI_PLAN_BATCH, else 0 */
    int grad_accum;       /* .plan.grad_accum (>= 1) with OOMI_PLAN_BATCH; 0 when absent/null */
    uint64_t device_peak; /* .memory.device_peak (bytes, or a size string) with OOMI_PLAN_PEAK */
} oomi_plan_doc;
/* Reads the plan at `path` (NULL: standard input, named "-") of at most OOMI_READ_MAX bytes.
 * OOM_EIO when it cannot be read, OOM_EINVAL past the cap or for a value out of range,
 * OOM_EPARSE when it is not a JSON object, OOM_ENOTFOUND for a missing part; every message names
 * the file and the key. */
int oomi_plan_doc_read(oomi_plan_doc *out, const char *path, unsigned want);

/* ---- JSON Lines files (jsonl.c) ------------------------------------------------------------
 * Opens `path` with `flags` (| O_CLOEXEC; O_CREAT makes it 0644) only if it is a regular file:
 * a FIFO, device or directory is refused without waiting for a FIFO's other end, and with
 * O_NOFOLLOW a symbolic link is refused by name. OOM_ENOTFOUND when it does not exist (without
 * O_CREAT), else OOM_EIO; messages name `what` ("calibration file") and the path. */
int oomi_open_regular(int *fd, const char *path, int flags, const char *what);
/* Reads a whole regular file opened so (the files in oomless's own places: a FIFO there would
 * block every command), of at most `max` bytes (as oomi_read_fd). */
int oomi_read_regular(char **out, size_t *len, const char *path, const char *what, size_t max);
/* Appends line[0..len) (one whole line, ending in '\n') to fd (opened O_RDWR | O_APPEND), all or
 * nothing: on a short write the file is cut back to its old size; a file not ending in '\n' gets
 * one first. Under flock(); fsync'ed. Not a regular file: written as a stream. 0 or an errno. */
int oomi_append_line(int fd, const char *line, size_t len);

/* ---- small helpers (util.c) ---------------------------------------------------------------- */
/* Case-insensitive compare treating '-', '_' and ' ' as equal ("a100_80gb" == "A100-80GB"). */
int oomi_name_cmp(const char *a, const char *b);
/* Levenshtein distance over the same normalisation, for "did you mean" lists. */
size_t oomi_name_distance(const char *a, const char *b);
/* Line and column (1-based, columns in UTF-8 characters) of byte `off` of buf; a byte order
 * mark at the start is not a column. */
void oomi_line_col(const char *buf, size_t off, size_t *line, size_t *col);

/* ---- strict numbers (units.c; sizes and margins: oom_parse_size, oom_parse_margin) --------- */
/* Strict integer parse of a whole string into [min, max]; OOM_EINVAL naming `what`. */
int oomi_parse_long(long long *out, const char *text, long long min, long long max,
                    const char *what);
/* Strict floating parse of a whole string (finite); OOM_EINVAL naming `what`. */
int oomi_parse_double(double *out, const char *text, const char *what);
/* A confidence strictly between 0 and 1, as a fraction ("0.95") or a percentage ("95%"). */
int oomi_parse_confidence(double *out, const char *text, const char *what);
/* OOM_EINVAL (recorded) when `text` is a number written with a decimal comma ("20,5", "0,5GiB",
 * as a de_DE or fr_FR locale writes it) or a thousands separator ("1,024"): the message names
 * `what` and the text and says to write '.'; OOM_OK for any other text (units.c). Every reader
 * of numbers and sizes asks it before calling a text malformed: the oomi_parse_* above,
 * oom_parse_size(), oom_parse_margin(), the tool's option parsers. */
int oomi_check_decimal_comma(const char *text, const char *what);

/* ---- YAML into json-c (yamlload.c) --------------------------------------------------------
 * Plain scalars follow the YAML 1.2 core schema (null, bool, int, float, string); quoted ones are
 * strings. OOM_EPARSE "name:line:col: problem" on bad YAML, and on a file of several documents
 * (---). An empty document gives NULL. */
struct json_object;
int oomi_yaml_load(struct json_object **out, const char *text, size_t len, const char *name);
int oomi_yaml_load_file(struct json_object **out, const char *path);
/* After one document was loaded from `parser`: OOM_EPARSE ("name:line:col: ...") when another
 * follows (all but the first would be ignored) or the rest does not parse. */
struct yaml_parser_s;
int oomi_yaml_single_document(struct yaml_parser_s *parser, const char *name);

/* ---- JSON helpers (json.c): every reader and writer of JSON uses these -------------------
 * Readers take the member `key` of object `o` (o may be NULL or not an object: nothing there).
 * When `found` is given, an absent or null member is OOM_OK with *found false (*out untouched);
 * without it, OOM_ENOTFOUND. A member of another type, or out of [min, max], is OOM_EINVAL.
 * Messages start with `where` followed by the key ("plan 'p.json': .plan." + "batch_size"):
 * "WHEREKEY is missing", "WHEREKEY must be a whole number, not \"8\"", "WHEREKEY 0 is out of range
 * (1 to 2147483647)". */
/* the member, NULL when absent or null */
struct json_object *oomi_json_get(struct json_object *o, const char *key);
/* a JSON number (int or double): never a string, which json-c would read in the host's locale */
bool oomi_json_is_number(struct json_object *v);
int oomi_json_int(int64_t *out, bool *found, struct json_object *o, const char *key, int64_t min,
                  int64_t max, const char *where);
/* a JSON number (int or double) */
int oomi_json_double(double *out, bool *found, struct json_object *o, const char *key, double min,
                     double max, const char *where);
/* Parses text[0..len) (NUL-terminated at len), a whole JSON document read from a file that
 * `name` names in messages ("model config 'c.json'", "plan 'p.json'"): a leading UTF-8 byte
 * order mark is skipped; whitespace may follow the value, nothing else. OOM_EPARSE "NAME line L
 * column C: unexpected character" (json-c's words), "NAME nests deeper than 32 levels, the most
 * json-c reads (...)". *out is the caller's to json_object_put(). */
int oomi_json_load(struct json_object **out, const char *text, size_t len, const char *name);
/* The same for a whole regular file of at most OOMI_READ_MAX bytes (oomi_read_regular(): a FIFO
 * is refused, never waited on), named "WHAT 'PATH'" ("model config 'c.json'") in messages. */
int oomi_json_load_file(struct json_object **out, const char *path, const char *what);
/* Adds key: v (v NULL = JSON null) to o (NULL: o could not be made); OOM_ENOMEM (recorded) when
 * o could not grow, and v is still the caller's, as with json_object_object_add(). */
int oomi_json_put(struct json_object *o, const char *key, struct json_object *v);
/* bytes as an integer; OOM_UNKNOWN as null (NULL) */
struct json_object *oomi_json_bytes(uint64_t v);
/* a size as an integer (above INT64_MAX: INT64_MAX) */
struct json_object *oomi_json_size(uint64_t v);
/* a string, or null for NULL or "" */
struct json_object *oomi_json_string_or_null(const char *s);
/* A JSON number printed with at most `decimals` decimals (trailing zeros dropped).  */
struct json_object *oomi_json_number(double v, int decimals);
/* Pretty-prints root into *out (allocated) and releases root (NULL: OOM_ENOMEM, recorded). */
int oomi_json_finish(char **out, struct json_object *root);

/* ---- unified diff (diff.c) ----------------------------------------------------------------- */
/* Unified diff (context 3) of two texts, "--- a/NAME" / "+++ b/NAME" headers, appended to sb;
 * nothing when they are equal. */
int oomi_diff(oomi_sb *sb, const char *name, const char *a, size_t alen, const char *b,
              size_t blen);

/* ---- safe writes (safewrite.c) -------------------------------------------------------------
 * A file is replaced by writing a temporary file beside it and renaming it over the file. The
 * replacement is given what the old file had: mode, owner, group and extended attributes (POSIX
 * ACLs included); when one of these cannot be kept the write is refused (OOM_EREFUSED). */
typedef void (*oomi_step_fn)(const char *step, const char *file, void *user);
/* Refuses (OOM_EREFUSED) a path that reaches outside the current directory through a symlink,
 * unless follow; *real gets the file to write (the symlink's target, allocated). */
int oomi_resolve_target(char **real, const char *path, bool follow);
/* Writes data to a new temporary file beside `path` (mkstemp, 0600), gives it the owner, group,
 * extended attributes and mode of the open file `like`, and fsyncs it; *tmp gets its name.
 * Steps "temp-created", "temp-written", "temp-synced". Nothing is left behind on failure. */
int oomi_write_temp(char **tmp, const char *path, int like, const char *data, size_t len,
                    oomi_step_fn step, void *user);
/* rename(tmp, path) (steps "before-rename", "renamed"); nothing allocated, so that a run of
 * several renames cannot fail half-way for want of memory */
int oomi_rename_temp(const char *tmp, const char *path, oomi_step_fn step, void *user);
/* fsync of the directory holding `path` */
int oomi_sync_dir(const char *path);

/* ---- locks and file identity (filelock.c) -------------------------------------------------
 * Cooperating writers (every `oomless apply`) take an exclusive flock(2) on the file they edit
 * from before they read it until after they replaced it; programs that do not lock are caught
 * by comparing the file's identity (device, inode, size, modification and change times) just
 * before the rename. flock locks vanish with their process: a killed run leaves no stale lock. */
struct stat;
/* Opens `path` read-only with an exclusive lock, waiting up to timeout_ms for another holder
 * (0: not at all; below 0: no lock is taken); reopens when the path was replaced while it
 * waited. *fd and *st describe the
 * locked file. OOM_EREFUSED when the wait runs out, OOM_EIO when the file cannot be opened. */
int oomi_open_locked(int *fd, struct stat *st, const char *path, long timeout_ms);
/* OOM_OK when `path` still names the file open as `fd` and that file has the size and times in
 * *st; OOM_EREFUSED naming `path` when it was replaced or written since *st was taken. */
int oomi_check_unchanged(int fd, const struct stat *st, const char *path);

#endif
