# test_apply.sh - `oomless apply`: golden before/after files, backups, dry-run diff,
# all-or-nothing, symlinks, stdin plans, SIGKILL at each write step, a file size limit.
. "$(dirname "$0")/lib.sh"

D="$OOMLESS_SRC/tests/data/apply"
PLAN="$D/plan.json"
W="$TMP/work"

# fresh copies of the inputs in $W (the current directory for every command)
fresh() {
    rm -rf "$W"
    mkdir -p "$W/conf"
    cp "$D/config.yaml" "$W/conf/config.yaml"
    chmod 640 "$W/conf/config.yaml" # a mode the rename must carry over
    cp "$D/ds_config.json" "$D/hf_args.json" "$W/"
    cd "$W" || exit 1
}
same() { # same FILE EXPECTED description
    if cmp -s "$1" "$2"; then ok; else bad "$3: $1 differs from $2:"; diff -u "$2" "$1" >&2; fi
}
no_temps() { # no temporary file left anywhere under $W
    local left
    left=$(find "$W" -name '.*.oomless-*' | wc -l)
    expect_eq "$left" 0 "$1: temporary files left"
}
HYDRA=(--preset hydra-lightning --allow-effective-batch-change --set training.trainer.precision=literal:bf16-mixed
       --set model.encoder.lora_r=literal:16)

# ---- Hydra YAML: exactly the changed lines, with a backup ----------------------------------
fresh
oom apply --plan "$PLAN" "${HYDRA[@]}" conf/config.yaml
expect_rc 0 "hydra apply"
same conf/config.yaml "$D/config.after.yaml" "hydra result"
same conf/config.yaml.bak "$D/config.yaml" "hydra backup"
expect_eq "$(diff "$D/config.yaml" conf/config.yaml | grep -c '^>')" 4 "hydra: changed lines"
expect_contains "$ERR" "conf/config.yaml: set data_loader.batch_size 45 -> 8" "hydra summary"
expect_eq "$(stat -c %a conf/config.yaml)" 640 "hydra: mode kept"
expect_eq "$(stat -c %a conf/config.yaml.bak)" 640 "hydra: backup mode"
no_temps "hydra"

# a second run changes nothing and writes nothing (the backup stays the old file)
oom apply --plan "$PLAN" "${HYDRA[@]}" conf/config.yaml
expect_rc 0 "hydra again"
same conf/config.yaml.bak "$D/config.yaml" "hydra: unchanged file not rewritten"

# ---- dry run: the unified diff, nothing written --------------------------------------------
fresh
cd conf && oom apply --plan "$PLAN" "${HYDRA[@]}" --dry-run config.yaml
expect_rc 0 "dry run"
expect_eq "$OUT" "$(cat "$D/config.diff")" "dry-run diff"
cd "$W" || exit 1
same conf/config.yaml "$D/config.yaml" "dry run leaves the file"
expect_eq "$(ls conf)" "config.yaml" "dry run: no backup"

# ---- DeepSpeed and HF TrainingArguments JSON -----------------------------------------------
fresh
oom apply --plan "$PLAN" --preset deepspeed --backup-suffix .orig ds_config.json
expect_rc 0 "deepspeed"
# its effective batch, 64 (train_batch_size; 16 x 4), is kept: the plan's micro-batch 8 with an
# accumulation of 8, where the plan (made for 32) has 4
same ds_config.json "$D/ds_config.after.json" "deepspeed result"
expect_contains "$ERR" "ds_config.json: the file's effective batch 64 is kept: micro-batch 8 x accumulation 8 x 1 GPU (the plan's accumulation was for an effective batch of 32" \
    "deepspeed: the effective batch kept, said"
same ds_config.json.orig "$D/ds_config.json" "deepspeed backup suffix"
oom apply --plan "$PLAN" --preset hf-trainer --no-backup hf_args.json
expect_rc 0 "hf-trainer"
same hf_args.json "$D/hf_args.after.json" "hf-trainer result"
expect_eq "$(ls hf_args.json*)" "hf_args.json" "--no-backup"

# ---- the plan from stdin, and --json ----------------------------------------------------------
fresh
run "$OOMLESS_BIN" apply --plan - --preset hydra-lightning --allow-effective-batch-change --json conf/config.yaml <"$PLAN"
expect_rc 0 "plan from stdin"
expect_one_json "apply --json"
expect_json '.files[0].edits[0] | "\(.key) \(.old) \(.new) \(.action)"' \
    "data_loader.batch_size 45 8 set" "json edit"
expect_json '.files[0].backup' "conf/config.yaml.bak" "json backup"
expect_json '.written' "true" "json written"
oom apply --plan - --set data_loader.batch_size=batch_size conf/config.yaml </dev/null
expect_rc 2 "empty plan on stdin"

# ---- presets skip missing keys; an explicit --set of a missing key is refused --------------
fresh
# (the HF file has DeepSpeed's accumulation key but not its micro-batch one: --partial)
# it has no ZeRO stage, which the plan's ZeRO-2 needs: refused, unless accepted (--allow-skipped)
oom apply --plan "$PLAN" --preset deepspeed --partial hf_args.json
expect_rc 1 "deepspeed preset on an HF file: no ZeRO stage"
expect_contains "$ERR" "'hf_args.json' has no 'zero_optimization.stage': the plan fits only with zero_stage 2; without the key the framework uses 0, so the run would not fit" \
    "the ZeRO stage the plan needs, missing"
oom apply --plan "$PLAN" --preset deepspeed --partial --allow-skipped hf_args.json
expect_rc 0 "deepspeed preset on an HF file, --allow-skipped"
expect_json_skip=$(printf '%s' "$ERR" | grep -c ': skipped ')
expect_eq "$expect_json_skip" 5 "deepspeed preset: missing keys skipped"
expect_contains "$ERR" "hf_args.json: no 'zero_optimization.stage' (--allow-skipped): the plan fits only with zero_stage 2" \
    "--allow-skipped: said"
oom apply --plan "$PLAN" --set no.such.key=batch_size conf/config.yaml
expect_rc 1 "missing explicit key"
expect_contains "$ERR" "'conf/config.yaml': key 'no.such.key' is not in the file" "missing key msg"
oom apply --plan "$PLAN" --create --set data_loader.prefetch=literal:2 conf/config.yaml
expect_rc 0 "--create"
expect_eq "$(grep -n 'prefetch' conf/config.yaml)" "14:  prefetch: 2" "created at the right place"

# ---- refusals leave the bytes alone --------------------------------------------------------
fresh
oom apply --plan "$PLAN" --set training.trainer.precision=batch_size conf/config.yaml
expect_rc 1 "type change refused"
expect_contains "$ERR" "training.trainer.precision" "type change names the key"
same conf/config.yaml "$D/config.yaml" "type change: unchanged"
printf 'a: [1, 2\nb: 1\n' >broken.yaml
oom apply --set b=literal:2 broken.yaml
expect_rc 2 "parse error"
expect_contains "$ERR" "'broken.yaml' line 2 column" "parse error position"
oom apply --preset no-such-preset conf/config.yaml
expect_rc 2 "unknown preset"
oom apply conf/config.yaml
expect_rc 2 "nothing to set"
oom apply --set data_loader.batch_size conf/config.yaml
expect_rc 2 "--set without ="
oom apply --plan "$PLAN" --backup-suffix .x --no-backup --preset deepspeed conf/config.yaml
expect_rc 2 "contradicting backup options"
oom apply --help
expect_rc 0 "--help"
expect_contains "$OUT" "literal:VALUE" "--help documents literals"
same conf/config.yaml "$D/config.yaml" "usage errors: unchanged"

# ---- all-or-nothing: the second file is refused, neither is written -------------------------
fresh
oom apply --plan "$PLAN" --set data_loader.batch_size=batch_size conf/config.yaml hf_args.json
expect_rc 1 "second file refused"
expect_contains "$ERR" "hf_args.json" "refusal names the second file"
same conf/config.yaml "$D/config.yaml" "all-or-nothing: first file unchanged"
same hf_args.json "$D/hf_args.json" "all-or-nothing: second file unchanged"
expect_eq "$(find "$W" -name '*.bak' | wc -l)" 0 "all-or-nothing: no backup"
no_temps "all-or-nothing"

# ---- symlinks leading outside the current directory ------------------------------------------
fresh
mkdir -p "$TMP/outside"
cp "$D/config.yaml" "$TMP/outside/config.yaml"
ln -s "$TMP/outside/config.yaml" link.yaml
oom apply --plan "$PLAN" --preset hydra-lightning --allow-effective-batch-change link.yaml
expect_rc 1 "symlink outside refused"
expect_contains "$ERR" "--follow-symlinks" "symlink message"
same "$TMP/outside/config.yaml" "$D/config.yaml" "symlink target unchanged"
oom apply --plan "$PLAN" --preset hydra-lightning --allow-effective-batch-change --follow-symlinks link.yaml
expect_rc 0 "--follow-symlinks"
expect_eq "$(grep -c 'batch_size: 8 ' "$TMP/outside/config.yaml")" 1 "symlink target edited"
if [ -L link.yaml ]; then ok; else bad "the link is still a link"; fi
ln -s conf/config.yaml inside.yaml
oom apply --plan "$PLAN" --preset hydra-lightning --allow-effective-batch-change inside.yaml
expect_rc 0 "symlink inside allowed"
expect_eq "$(grep -c 'batch_size: 8 ' conf/config.yaml)" 1 "symlink inside: its target edited"
if [ -L inside.yaml ]; then ok; else bad "symlink inside: the link is still a link"; fi

# ---- SIGKILL at each step: the file is old or new, the backup the previous or the new one ----
# An earlier backup is there: it is replaced only once the file is new. At most two temporary
# files are left: the file's (.config.yaml.oomless-XXXXXX, 0600 until it is complete) and the new
# backup's (.config.yaml.bak.oomless-XXXXXX, complete: the old text, the file's mode).
for step in locked prepared temp-created temp-written temp-synced backup-written before-rename renamed \
    backup-renamed dir-synced; do
    fresh
    printf 'previous backup\n' >conf/config.yaml.bak
    # (the subshell keeps bash's "Killed" report out of the log)
    (OOMLESS_APPLY_TEST_KILL_AT=$step "$OOMLESS_BIN" apply --plan "$PLAN" "${HYDRA[@]}" \
        conf/config.yaml >/dev/null 2>&1; exit $?) 2>/dev/null
    RC=$?
    expect_rc 137 "killed at $step"
    if cmp -s conf/config.yaml "$D/config.yaml"; then state=old
    elif cmp -s conf/config.yaml "$D/config.after.yaml"; then state=new
    else state=partial; fi
    case $step in
    locked | prepared | temp-* | backup-written | before-rename)
        expect_eq "$state" old "killed at $step" ;;
    *) expect_eq "$state" new "killed at $step" ;;
    esac
    if cmp -s conf/config.yaml.bak "$D/config.yaml"; then bstate=new
    elif [ "$(cat conf/config.yaml.bak)" = "previous backup" ]; then bstate=previous
    else bstate=other; fi
    case $step in
    backup-renamed | dir-synced) expect_eq "$bstate" new "killed at $step: backup" ;;
    *) expect_eq "$bstate" previous "killed at $step: backup" ;;
    esac
    btemps=$(find "$W" -name '.config.yaml.bak.oomless-*' | wc -l)
    temps=$(find "$W" -name '.config.yaml.oomless-*' | wc -l)
    case $step in
    backup-written | before-rename | renamed) want=1 ;;
    *) want=0 ;;
    esac
    expect_eq "$btemps" "$want" "killed at $step: the new backup's temporary file"
    case $step in
    temp-* | backup-written | before-rename) want=1 ;;
    *) want=0 ;;
    esac
    expect_eq "$temps" "$want" "killed at $step: the file's temporary file"
    expect_eq "$(find "$W" -name '.*.oomless-*' | wc -l)" "$((temps + btemps))" \
        "killed at $step: no other temporary file"
    if [ "$btemps" = 1 ]; then
        t=$(find "$W" -name '.config.yaml.bak.oomless-*')
        expect_eq "$(dirname "$t")" "$W/conf" "the backup's temporary file is beside it"
        same "$t" "$D/config.yaml" "the backup's temporary file at $step"
        expect_eq "$(stat -c %a "$t")" 640 "the backup's temporary file mode at $step"
    fi
    if [ "$temps" = 1 ]; then
        t=$(find "$W" -name '.config.yaml.oomless-*')
        expect_eq "$(dirname "$t")" "$W/conf" "temporary file beside the file at $step"
        # 0600 until it is complete and synced, then the file's own mode
        case $step in
        temp-created | temp-written) want=600 ;;
        *) want=640 ;;
        esac
        expect_eq "$(stat -c %a "$t")" "$want" "temporary file mode at $step"
    fi
done

# ---- a file size limit on the temporary file: error, original intact, nothing left ---------
fresh
for i in $(seq 1 80); do echo "# padding $i ......................................................."; done >>conf/config.yaml
cp conf/config.yaml "$TMP/big.yaml"
(ulimit -f 4; "$OOMLESS_BIN" apply --plan "$PLAN" --preset hydra-lightning --allow-effective-batch-change --no-backup \
    conf/config.yaml >"$TMP/out" 2>"$TMP/err"; echo $? >"$TMP/rc")
RC=$(cat "$TMP/rc") ERR=$(cat "$TMP/err")
expect_rc 3 "file size limit"
expect_contains "$ERR" "File too large" "file size limit message"
same conf/config.yaml "$TMP/big.yaml" "file size limit: original intact"
no_temps "file size limit"
(ulimit -f 4; "$OOMLESS_BIN" apply --plan "$PLAN" --preset hydra-lightning --allow-effective-batch-change \
    conf/config.yaml >"$TMP/out" 2>"$TMP/err"; echo $? >"$TMP/rc")
RC=$(cat "$TMP/rc")
expect_rc 3 "file size limit on the backup"
same conf/config.yaml "$TMP/big.yaml" "backup failure: original intact"
no_temps "backup failure"

# ---- YAML files of several documents: refused, or the one given with --document -------------
fresh
printf 'model: {batch: 1}\n---\ntrain:\n  batch: 2\n' >multi.yaml
cp multi.yaml "$TMP/multi.yaml"
oom apply --set train.batch=literal:8 multi.yaml
expect_rc 1 "several documents"
expect_contains "$ERR" "'multi.yaml' holds 2 YAML documents" "several documents: message"
expect_contains "$ERR" "--document N" "several documents: says how"
oom apply --create --set model.lr=literal:0.5 multi.yaml
expect_rc 1 "several documents, --create"
same multi.yaml "$TMP/multi.yaml" "several documents: unchanged"
oom apply --no-backup --document 2 --set train.batch=literal:8 multi.yaml
expect_rc 0 "--document 2"
expect_eq "$(cat multi.yaml)" "$(printf 'model: {batch: 1}\n---\ntrain:\n  batch: 8')" \
    "--document 2: the second document edited"
oom apply --no-backup --document 2 --create --set train.lr=literal:0.5 multi.yaml
expect_rc 0 "--document 2 --create"
expect_eq "$(cat multi.yaml)" \
    "$(printf 'model: {batch: 1}\n---\ntrain:\n  batch: 8\n  lr: 0.5')" "created in the second"
oom apply --no-backup --document 1 --create --set model.batch=literal:4 multi.yaml
expect_rc 0 "--document 1"
expect_eq "$(head -n 1 multi.yaml)" "model: {batch: 4}" "--document 1: the first document edited"
oom apply --document 3 --set train.batch=literal:8 multi.yaml
expect_rc 1 "--document past the last"
expect_contains "$ERR" "'multi.yaml' holds 2 YAML documents, not 3" "--document 3: message"
oom apply --document 0 --set train.batch=literal:8 multi.yaml
expect_rc 2 "--document 0"
expect_contains "$ERR" "--document '0'" "--document 0: message"
oom apply --document 2 --set train_batch_size=literal:8 ds_config.json
expect_rc 1 "--document 2 of a JSON file"
expect_contains "$ERR" "'ds_config.json' is JSON: it holds one document, not 2" "JSON: message"
# the same holds for every YAML file oomless reads: a presets file of two documents
mkdir -p "$TMP/xdg2/oomless"
printf 'mine:\n  set: {training.seed: literal:7}\n---\nother:\n  set: {a: literal:1}\n' \
    >"$TMP/xdg2/oomless/apply-presets.yaml"
XDG_CONFIG_HOME="$TMP/xdg2" run "$OOMLESS_BIN" apply --preset mine conf/config.yaml
expect_rc 2 "a presets file of two documents"
expect_contains "$ERR" "apply-presets.yaml:3:1: a second YAML document" "presets: message"
same conf/config.yaml "$D/config.yaml" "presets file of two documents: unchanged"

# ---- a long file (600,000 lines, 15 MB): no length limit; the diff only when asked for -------
fresh
{ cat "$D/config.yaml"; awk 'BEGIN { print "layers:"
    for (i = 0; i < 600000; i++) printf "  l%d: {dim: %d, act: gelu}\n", i, i }'; } >big.yaml
cp big.yaml "$TMP/big.yaml"
oom apply --no-backup --set data_loader.batch_size=literal:8 \
    --set layers.l599999.dim=literal:7 big.yaml
expect_rc 0 "a file of 600,000 lines"
expect_eq "$(grep -c 'batch_size: 8 ' big.yaml)" 1 "long file: first edit"
expect_eq "$(tail -n 1 big.yaml)" "  l599999: {dim: 7, act: gelu}" "long file: last edit"
expect_eq "$OUT" "" "long file: no diff unless asked for"
cp big.yaml "$TMP/big1.yaml"
oom apply --no-backup --diff --set data_loader.batch_size=literal:16 --create \
    --set layers.l300000.drop=literal:0.1 --set layers.l599999.dim=literal:9 big.yaml
expect_rc 0 "long file, --diff"
expect_eq "$OUT" "$(diff -u --label a/big.yaml --label b/big.yaml "$TMP/big1.yaml" big.yaml)" \
    "long file: --diff is what diff -u prints"
oom apply --dry-run --set layers.l0.dim=literal:5 big.yaml
expect_rc 0 "long file, --dry-run"
expect_contains "$OUT" "+  l0: {dim: 5, act: gelu}" "long file: dry-run diff"
oom apply --diff --json --set layers.l0.dim=literal:5 big.yaml
expect_rc 2 "--diff with --json"

# ---- a failed write leaves the previous backup alone ------------------------------------------
# The file (3 KB) and its backup fit under a 4 KB size limit, the new text (over 4 KB) does not:
# the write fails after the backup could have been written; the previous backup must survive.
fresh
for i in $(seq 1 30); do echo "# padding $i ......................................................."; done >>conf/config.yaml
cp conf/config.yaml "$TMP/mid.yaml"
printf 'previous backup\n' >conf/config.yaml.bak
LONG=$(printf 'x%.0s' $(seq 1 1500))
(ulimit -f 4; "$OOMLESS_BIN" apply --create --set "notes=literal:$LONG" conf/config.yaml \
    >"$TMP/out" 2>"$TMP/err"; echo $? >"$TMP/rc")
RC=$(cat "$TMP/rc") ERR=$(cat "$TMP/err")
expect_rc 3 "write failure with an earlier backup"
expect_contains "$ERR" "File too large" "write failure: message"
same conf/config.yaml "$TMP/mid.yaml" "write failure: the file is unchanged"
expect_eq "$(cat conf/config.yaml.bak)" "previous backup" "write failure: the previous backup is kept"
no_temps "write failure with an earlier backup"

# ---- an empty backup suffix is refused (it would be no backup, or the file itself) ------------
fresh
oom apply --plan "$PLAN" --preset hydra-lightning --allow-effective-batch-change --backup-suffix '' conf/config.yaml
expect_rc 2 "empty backup suffix"
expect_contains "$ERR" "backup suffix '' is empty" "empty backup suffix: message"
same conf/config.yaml "$D/config.yaml" "empty backup suffix: unchanged"
expect_eq "$(ls conf)" "config.yaml" "empty backup suffix: nothing written"

# ---- user presets -------------------------------------------------------------------------------
fresh
mkdir -p "$TMP/xdg/oomless"
cat >"$TMP/xdg/oomless/apply-presets.yaml" <<'EOF'
mine:
  description: test preset
  set:
    training.seed: literal:7
    data_loader.num_workers: grad_accum
EOF
XDG_CONFIG_HOME="$TMP/xdg" run "$OOMLESS_BIN" apply --preset mine --plan "$PLAN" conf/config.yaml
expect_rc 0 "user preset"
expect_eq "$(grep -E 'seed|num_workers' conf/config.yaml | tr -s ' ')" \
    "$(printf ' num_workers: 4\n seed: 7')" "user preset values"
# a FIFO in the user presets' place: refused at once, not waited on
mkdir -p "$TMP/xdg-fifo/oomless" && mkfifo "$TMP/xdg-fifo/oomless/apply-presets.yaml"
XDG_CONFIG_HOME="$TMP/xdg-fifo" run timeout 30 "$OOMLESS_BIN" apply --preset mine --plan "$PLAN" conf/config.yaml
expect_rc 3 "user presets FIFO: refused, no hang"
expect_contains "$ERR" "presets file '$TMP/xdg-fifo/oomless/apply-presets.yaml' is a FIFO, not a regular file" \
    "user presets FIFO: message"

# ---- the plan: one reader with a cap (64 MiB); past it, or unreadable, a bad file (exit 2) -------
fresh
cp conf/config.yaml "$TMP/config.before.yaml"
truncate -s 73505997 "$TMP/huge-plan.json" # 70.1 MiB
oom apply --plan "$TMP/huge-plan.json" "${HYDRA[@]}" conf/config.yaml
expect_rc 2 "plan past the cap"
expect_contains "$ERR" "$TMP/huge-plan.json: 70.1 MiB is larger than the 64 MiB this reads" \
    "plan past the cap: size and cap named"
same conf/config.yaml "$TMP/config.before.yaml" "plan past the cap: nothing written"
oom apply --plan "$TMP/no-such-plan.json" "${HYDRA[@]}" conf/config.yaml
expect_rc 2 "missing plan"
expect_contains "$ERR" "cannot open '$TMP/no-such-plan.json'" "missing plan: named"
rm -f "$TMP/huge-plan.json" "$TMP/config.before.yaml"

# ---- a UTF-8 byte order mark (Windows editors write one): read, and kept in the file ----------
fresh
BOM=$(printf '\357\273\277')
{ printf '%s' "$BOM"; cat "$PLAN"; } >"$TMP/bom-plan.json"
for f in ds_config.json conf/config.yaml; do
    { printf '%s' "$BOM"; cat "$f"; } >"$f.new" && mv "$f.new" "$f"
done
oom apply --plan "$TMP/bom-plan.json" --preset deepspeed --no-backup ds_config.json
expect_rc 0 "deepspeed JSON with a byte order mark, plan with one"
{ printf '%s' "$BOM"; cat "$D/ds_config.after.json"; } >"$TMP/ds.after.json"
same ds_config.json "$TMP/ds.after.json" "JSON with a byte order mark: the values' bytes only"
oom apply --plan "$TMP/bom-plan.json" "${HYDRA[@]}" --no-backup conf/config.yaml
expect_rc 0 "YAML with a byte order mark"
{ printf '%s' "$BOM"; cat "$D/config.after.yaml"; } >"$TMP/config.after.yaml"
same conf/config.yaml "$TMP/config.after.yaml" "YAML with a byte order mark: the values' bytes only"
rm -f "$TMP/bom-plan.json" "$TMP/ds.after.json" "$TMP/config.after.yaml"

finish
