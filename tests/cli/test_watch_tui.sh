#!/usr/bin/env bash
# test_watch_tui.sh - the interactive view of `oomless watch`, driven through tmux: what it draws,
# a GPU lost while watching, the keys, a resize, the signals that end it and the terminal left
# behind, a log that cannot be written, and TERM=dumb on a terminal.
. "$(dirname "$0")/watch_common.sh"

# ---- the interactive view, in tmux -----------------------------------------------------------
if ! command -v tmux >/dev/null; then
    bad "tmux is not installed"
    finish
    exit
fi
write_events "$TMP/events.jsonl"
# the T4 stops answering after 6 memory queries: about 1 s into the first view, after it has
# been drawn answering
fake_nvml "${SPEC/used=0/used=0 lost_after=6}"
TMUX_SOCK="$TMP/tmux.sock"
T() { tmux -S "$TMUX_SOCK" -f /dev/null "$@"; }
cat >"$TMP/watch.sh" <<EOF
export OOMLESS_NVML_LIBRARY='$OOMLESS_NVML_LIBRARY' FAKE_NVML_SPEC='$FAKE_NVML_SPEC'
export OOMLESS_DATA_DIR='$OOMLESS_DATA_DIR' XDG_CONFIG_HOME='$XDG_CONFIG_HOME'
echo "\$\$" >'$TMP/watch.pid'
"$OOMLESS_BIN" watch --interval 0.2 --events '$TMP/events.jsonl' "\$@"
echo "watch-exit=\$?"
EOF
# pane_wait PATTERN: polls the pane for up to 10 s until it shows PATTERN; leaves the last
# capture in $PANE. pane_gone PATTERN: the same, until the pane no longer shows it.
pane_wait() {
    local i
    for i in $(seq 200); do
        PANE=$(T capture-pane -p -t w)
        case "$PANE" in *"$1"*) return 0 ;; esac
        sleep 0.05
    done
    return 1
}
pane_gone() {
    local i
    for i in $(seq 200); do
        PANE=$(T capture-pane -p -t w)
        case "$PANE" in *"$1"*) ;; *) return 0 ;; esac
        sleep 0.05
    done
    return 1
}
expect_pane() { if pane_wait "$1"; then ok; else bad "$2: '$1' not in pane:"; printf '%s\n' "$PANE" >&2; fi; }
alt_screen() { T display -p -t w '#{alternate_on}'; }
start_watch() { # start_watch [TERM value] [args...]
    local term=$1
    shift
    T send-keys -t w "clear; TERM=$term bash $TMP/watch.sh $*" Enter
}

T new-session -d -s w -x 110 -y 36 "env PS1='ready> ' bash --norc --noprofile"
expect_pane "ready>" "tmux: shell started"
start_watch screen
expect_pane "NVIDIA A100-SXM4-80GB" "tui: GPU name drawn"
expect_pane "[||" "tui: a bar drawn"
expect_pane "7.00 GiB / 80.00 GiB" "tui: used / total"
expect_pane "Tesla T4" "tui: second GPU panel"
expect_pane "sleep 300" "tui: process command"
expect_pane "(not in this PID namespace)" "tui: foreign pid flagged"
expect_pane "restart pid 101 attempt 2 batch 16 (changed)" "tui: events listed"
expect_eq "$(alt_screen)" 1 "tui: alternate screen while running"
printf '%s\n' "$PANE" >"$TMP/screen.txt"
expect_pane "lost: the device stopped answering" "tui: a GPU lost mid-watch is shown lost"
expect_pane "  GPU 1  Tesla T4" "tui: the lost GPU keeps its name"
T send-keys -t w p
expect_pane "[PAUSED]" "tui: p pauses"
T send-keys -t w p
if pane_gone "[PAUSED]"; then ok; else bad "tui: p again resumes: still paused:"; printf '%s\n' "$PANE" >&2; fi
T send-keys -t w +
expect_pane "every 0.5 s" "tui: + slows down"
T send-keys -t w - -
expect_pane "every 0.1 s" "tui: - speeds up"
T send-keys -t w Down
expect_pane "> GPU 1  Tesla T4" "tui: arrow selects GPU 1"
T resize-window -t w -x 80 -y 24 2>/dev/null || T resize-pane -t w -x 80 -y 24
expect_pane "NVIDIA A100" "tui: redrawn after a resize"
T send-keys -t w q
expect_pane "watch-exit=0" "tui: q exits with 0"
expect_eq "$(alt_screen)" 0 "tui: q leaves the alternate screen"
expect_pane "ready>" "tui: the prompt is back"

T resize-window -t w -x 110 -y 36 2>/dev/null
start_watch screen
expect_pane "NVIDIA A100-SXM4-80GB" "tui (2): started"
# the oomless that watch.sh started (a child of the shell whose PID it wrote)
pid=$(pgrep -P "$(cat "$TMP/watch.pid")" || true)
if [ -n "$pid" ]; then kill -TERM "$pid"; else bad "tui: no watch process to signal"; fi
expect_pane "watch-exit=143" "tui: SIGTERM exits with 128+15"
expect_eq "$(alt_screen)" 0 "tui: SIGTERM restores the terminal"

start_watch screen
expect_pane "NVIDIA A100-SXM4-80GB" "tui (3): started"
T send-keys -t w C-c
expect_pane "watch-exit=130" "tui: Ctrl-C exits with 128+2"
expect_eq "$(alt_screen)" 0 "tui: Ctrl-C restores the terminal"

start_watch screen
expect_pane "NVIDIA A100-SXM4-80GB" "tui (4): started"
T send-keys -t w 'C-\'
expect_pane "watch-exit=131" "tui: Ctrl-\\ exits with 128+3"
expect_eq "$(alt_screen)" 0 "tui: Ctrl-\\ restores the terminal"

# a log that cannot be written: the view says so and goes on; the message comes after it
start_watch screen --log /dev/full
expect_pane "[LOG NOT WRITTEN]" "tui: a failing --log shown in the title bar"
expect_pane "Tesla T4" "tui: still watching with the log failing"
T send-keys -t w q
expect_pane "watch-exit=3" "tui: exit 3 when samples were not logged"
expect_pane "cannot write '/dev/full': No space left on device" "tui: the log's failure said after the view"
expect_eq "$(alt_screen)" 0 "tui: the terminal restored"

start_watch dumb --count 2
expect_pane "watch-exit=0" "TERM=dumb on a terminal: text mode"
expect_contains "$PANE" "GPU 0  NVIDIA A100-SXM4-80GB  [" "TERM=dumb on a terminal: text snapshot"
expect_eq "$(alt_screen)" 0 "TERM=dumb: no alternate screen"

finish
