# test_apply_race.sh - `oomless apply` and others writing the same file at the same time: two
# applies follow each other (both edits kept), a program that does not lock makes apply refuse
# (its write kept), a held lock is waited for or refused, a killed apply leaves no stale lock,
# and one file named twice in a run is refused. The races are made deterministic with the
# test-only hook OOMLESS_APPLY_TEST_STOP_AT=STEP (the process stops itself there until SIGCONT).
. "$(dirname "$0")/lib.sh"

D="$OOMLESS_SRC/tests/data/apply"
W="$TMP/work"

fresh() {
    rm -rf "$W"
    mkdir -p "$W/conf"
    cp "$D/config.yaml" "$W/conf/config.yaml"
    cd "$W" || exit 1
}
stopped() { [ "$(cut -d' ' -f3 "/proc/$1/stat" 2>/dev/null)" = T ]; }
gone() { # exited (a zombie until it is waited for) or not there
    local st
    st=$(cut -d' ' -f3 "/proc/$1/stat" 2>/dev/null)
    [ -z "$st" ] || [ "$st" = Z ]
}
# reap PID: its exit status in $?; one that is still stopped or running after 30 s is a failure
# (and is killed, so that the test cannot hang)
reap() {
    if ! poll 30 gone "$1"; then
        bad "process $1 still there after 30 s"
        kill -KILL "$1" 2>/dev/null
    fi
    wait "$1"
}
no_temps() { expect_eq "$(find "$W" -name '.*.oomless-*' | wc -l)" 0 "$1: temporary files left"; }
# apply in the background, stopped at STEP once it has read (and locked) the file
start_stopped() { # start_stopped NAME STEP ARGS...
    local name=$1 step=$2
    shift 2
    OOMLESS_APPLY_TEST_STOP_AT=$step "$OOMLESS_BIN" apply "$@" >"$TMP/$name.out" \
        2>"$TMP/$name.err" &
}

# ---- two applies on one file: the second waits for the first, then edits its result ----------
fresh
start_stopped a prepared --set data_loader.batch_size=literal:8 conf/config.yaml
A=$!
poll 10 stopped $A || bad "the first apply did not stop at 'prepared'"
start_stopped b prepared --set training.seed=literal:7 conf/config.yaml
B=$!
# the second must not read the file while the first holds it: it does not get to 'prepared'
if poll 2 stopped $B; then
    bad "the second apply read the file while the first was editing it"
    kill -CONT $B
else
    ok
fi
kill -CONT $A
reap $A
expect_eq "$?" 0 "the first apply"
poll 10 stopped $B && kill -CONT $B
reap $B
expect_eq "$?" 0 "the second apply: $(cat "$TMP/b.err")"
expect_eq "$(grep -c 'batch_size: 8 ' conf/config.yaml)" 1 "the first edit is kept"
expect_eq "$(grep -c 'seed: 7$' conf/config.yaml)" 1 "the second edit is kept"
expect_eq "$(grep -c 'batch_size: 8 ' conf/config.yaml.bak)" 1 "the backup is the first result"
no_temps "two applies"

# ---- two runs on two files named in opposite orders: no deadlock, both edits kept ----------
# The first stops holding its first lock; the second, named the other way round, must not lock
# the other file meanwhile (then each would wait for the other): files are locked in one order.
fresh
cp conf/config.yaml conf/other.yaml
start_stopped a locked --set data_loader.batch_size=literal:8 conf/config.yaml conf/other.yaml
A=$!
poll 10 stopped $A || bad "the first apply did not stop at 'locked'"
"$OOMLESS_BIN" apply --set training.seed=literal:7 conf/other.yaml conf/config.yaml \
    >"$TMP/b.out" 2>"$TMP/b.err" &
B=$!
sleep 0.3
kill -CONT $A
reap $A
expect_eq "$?" 0 "opposite orders: the first apply: $(cat "$TMP/a.err")"
reap $B
expect_eq "$?" 0 "opposite orders: the second apply: $(cat "$TMP/b.err")"
for f in conf/config.yaml conf/other.yaml; do
    expect_eq "$(grep -c -e 'batch_size: 8 ' -e 'seed: 7$' $f)" 2 "opposite orders: both edits in $f"
done
no_temps "opposite orders"

# ---- a program that does not lock writes the file meanwhile: refused, its write kept ----------
for how in append replace; do
    fresh
    start_stopped a prepared --set data_loader.batch_size=literal:8 conf/config.yaml
    A=$!
    poll 10 stopped $A || bad "apply did not stop ($how)"
    if [ $how = append ]; then
        printf '# written by an editor\n' >>conf/config.yaml
    else # as editors and sed -i save: a new file renamed over the old one
        { cat conf/config.yaml; printf '# written by an editor\n'; } >conf/new.yaml
        mv conf/new.yaml conf/config.yaml
    fi
    cp conf/config.yaml "$TMP/theirs.yaml"
    kill -CONT $A
    reap $A
    RC=$? ERR=$(cat "$TMP/a.err")
    expect_rc 1 "another program wrote the file ($how)"
    expect_contains "$ERR" "by another program while apply edited it" "message ($how)"
    expect_contains "$ERR" "'conf/config.yaml'" "the message names the file ($how)"
    if cmp -s conf/config.yaml "$TMP/theirs.yaml"; then ok; else bad "their write was lost ($how)"; fi
    expect_eq "$(ls conf)" "config.yaml" "no backup written ($how)"
    no_temps "another program ($how)"
done

# ---- a lock held by another program: waited for, or refused after --lock-timeout ------------
# (the holder: a process that takes the lock, then becomes `sleep`, keeping it)
hold_lock() { (flock 9 && exec sleep "$1") 9<conf/config.yaml & }
fresh
hold_lock 30
H=$!
poll 10 bash -c '! flock -n conf/config.yaml true' || bad "the test could not take the lock"
oom apply --lock-timeout 0.3 --set data_loader.batch_size=literal:8 conf/config.yaml
expect_rc 1 "locked file"
expect_contains "$ERR" "'conf/config.yaml' is locked by another program" "locked: message"
expect_contains "$ERR" "waited 0.3 s" "locked: how long it waited"
if cmp -s conf/config.yaml "$D/config.yaml"; then ok; else bad "a locked file was written"; fi
kill $H
wait $H 2>/dev/null
oom apply --lock-timeout x --set data_loader.batch_size=literal:8 conf/config.yaml
expect_rc 2 "bad --lock-timeout"
expect_contains "$ERR" "--lock-timeout 'x'" "bad --lock-timeout names the value"
hold_lock 1
H=$!
poll 10 bash -c '! flock -n conf/config.yaml true' || bad "the test could not take the lock"
oom apply --set data_loader.batch_size=literal:8 conf/config.yaml
expect_rc 0 "a lock released within the timeout is waited for"
expect_eq "$(grep -c 'batch_size: 8 ' conf/config.yaml)" 1 "written after the wait"
wait $H

# ---- a killed apply leaves no lock behind ------------------------------------------------------
fresh
(OOMLESS_APPLY_TEST_KILL_AT=temp-synced "$OOMLESS_BIN" apply \
    --set data_loader.batch_size=literal:8 conf/config.yaml >/dev/null 2>&1; exit $?) 2>/dev/null
expect_eq "$?" 137 "killed while holding the lock"
oom apply --lock-timeout 0 --set data_loader.batch_size=literal:8 conf/config.yaml
expect_rc 0 "no stale lock after a kill"
expect_eq "$(grep -c 'batch_size: 8 ' conf/config.yaml)" 1 "after a kill: the next apply edits the file"

# ---- one file named twice, or as another's backup: refused before anything is written --------
fresh
ln -s conf/config.yaml link.yaml
for second in ./conf/config.yaml conf/../conf/config.yaml link.yaml; do
    oom apply --set data_loader.batch_size=literal:8 conf/config.yaml "$second"
    expect_rc 2 "the same file twice ($second)"
    expect_contains "$ERR" "are the same file" "same file message ($second)"
done
cp conf/config.yaml conf/config.yaml.bak
oom apply --set data_loader.batch_size=literal:8 conf/config.yaml conf/config.yaml.bak
expect_rc 2 "a file and its backup in one run"
expect_contains "$ERR" "the backup of 'conf/config.yaml' would replace 'conf/config.yaml.bak'" \
    "backup collision message"
if cmp -s conf/config.yaml "$D/config.yaml" && cmp -s conf/config.yaml.bak "$D/config.yaml"; then
    ok
else
    bad "a refused run changed a file"
fi
no_temps "refused runs"

finish
