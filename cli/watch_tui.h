/*
 * watch_tui.h - the interactive view of `oomless watch` (watch_tui.c, ncursesw), driven by
 * cmd_watch.c over a watch session (watch_session.h).
 */
#ifndef OOMLESS_WATCH_TUI_H
#define OOMLESS_WATCH_TUI_H

#include "watch_session.h"

/* 1 when stdin and stdout are terminals whose TERM can address the cursor */
int watch_tui_available(void);
/* Runs the interactive view until q, a signal or --count; returns the exit code. The terminal is
 * restored on every path. */
int watch_tui_run(struct watch_ctx *w);

#endif
