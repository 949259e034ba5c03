# test_apply_batch.sh - `oomless apply` and the effective batch: a file with the micro-batch key
# but not the accumulation one (or the other way round) is refused byte for byte unless
# --create or --partial; comments that still name an old value are reported, never edited.
. "$(dirname "$0")/lib.sh"

D="$OOMLESS_SRC/tests/data/apply"
PLAN="$D/plan.json" # batch 8 x accumulation 4 on 1 GPU: effective batch 32
W="$TMP/work"
mkdir -p "$W"
cd "$W" || exit 1

same() { # same FILE EXPECTED description
    if cmp -s "$1" "$2"; then ok; else bad "$3: $1 differs from $2:"; diff -u "$2" "$1" >&2; fi
}
without() { # without WORD SOURCE NAME: NAME (and a copy NAME.orig) is SOURCE less WORD's lines
    grep -v "$1" "$2" >"$3"
    cp "$3" "$3.orig"
}
refused() { # refused NAME PRESET description: apply refuses (exit 1) and NAME stays as it was
    oom apply --plan "$PLAN" --preset "$2" "$1"
    expect_rc 1 "$3: refused"
    same "$1" "$1.orig" "$3: file unchanged"
}

# ---- YAML without the accumulation key: refused, file intact ---------------------------------
without accumulate_grad_batches "$D/config.yaml" noacc.yaml
refused noacc.yaml hydra-lightning "yaml: missing accumulation"
expect_eq "$(ls noacc.yaml.bak 2>/dev/null)" "" "yaml refusal: no backup"
expect_contains "$ERR" "'noacc.yaml' has 'data_loader.batch_size' but not \
'training.trainer.accumulate_grad_batches' (grad_accum 4 in the plan)" "yaml refusal names the key"
expect_contains "$ERR" "would silently change the effective batch from 45 to 8" \
    "yaml refusal says why"
expect_contains "$ERR" "the plan's effective batch is 32" "yaml refusal: the plan's batch"
oom apply --plan "$PLAN" --preset hydra-lightning --dry-run noacc.yaml
expect_rc 1 "yaml: refused in a dry run too"
expect_eq "$OUT" "" "yaml dry-run refusal: no diff"
oom apply --plan "$PLAN" --preset hydra-lightning --json noacc.yaml
expect_rc 1 "yaml: refused with --json"
same noacc.yaml noacc.yaml.orig "json-output refusal: file unchanged"

# the refusal holds for every file of the call: none is written
cp "$D/config.yaml" full.yaml
oom apply --plan "$PLAN" --preset hydra-lightning noacc.yaml full.yaml
expect_rc 1 "two files, one without the key"
same full.yaml "$D/config.yaml" "the other file is unchanged too"
rm -f full.yaml

# ---- --create adds the key where it belongs, in the file's own layout -------------------------
oom apply --plan "$PLAN" --preset hydra-lightning --create --no-backup noacc.yaml
expect_rc 0 "yaml --create"
expect_contains "$ERR" "noacc.yaml: create training.trainer.accumulate_grad_batches - -> 4" \
    "yaml --create summary"
expect_eq "$(diff noacc.yaml.orig noacc.yaml | grep -c '^[<>]')" 3 "yaml --create: 3 diff lines"
expect_eq "$(grep -n 'accumulate_grad_batches' noacc.yaml)" \
    "27:    accumulate_grad_batches: 4" "yaml --create: in training.trainer, its indentation"
expect_eq "$(grep -c '^  batch_size: 8        # größe pro GPU' noacc.yaml)" 1 \
    "yaml --create: the batch and its comment"

# ---- --partial writes what there is and says how the effective batch changes ---------------
cp noacc.yaml.orig noacc.yaml
oom apply --plan "$PLAN" --preset hydra-lightning --partial --no-backup noacc.yaml
expect_rc 0 "yaml --partial"
expect_contains "$ERR" "noacc.yaml: no 'training.trainer.accumulate_grad_batches' (--partial): \
the effective batch changes from 45 to 8 (an accumulation the file does not set is 1; the \
plan's effective batch is 32)" "yaml --partial message"
expect_eq "$(diff noacc.yaml.orig noacc.yaml | grep -c '^>')" 1 "yaml --partial: one line changed"
cp noacc.yaml.orig noacc.yaml
oom apply --plan "$PLAN" --preset hydra-lightning --partial --json --dry-run noacc.yaml
expect_rc 0 "yaml --partial --json"
expect_one_json "partial --json"
expect_json '.files[0].notes[0].message | test("from 45 to 8")' "true" "partial note in --json"
expect_json '.files[0].notes[0].line' "null" "partial note: no line"
oom apply --plan "$PLAN" --preset hydra-lightning --partial --create noacc.yaml
expect_rc 2 "--partial with --create"
same noacc.yaml noacc.yaml.orig "usage error: unchanged"

# ---- JSON: HF TrainingArguments without gradient_accumulation_steps ---------------------------
without gradient_accumulation_steps "$D/hf_args.json" hf.json
refused hf.json hf-trainer "json: missing accumulation"
expect_contains "$ERR" "but not 'gradient_accumulation_steps'" "json refusal names the key"
expect_contains "$ERR" "from 4 to 8" "json refusal: 4 x 1 becomes 8 x 1"
oom apply --plan "$PLAN" --preset hf-trainer --create --no-backup hf.json
expect_rc 0 "json --create"
expect_eq "$(tail -n 3 hf.json)" '    "report_to": ["tensorboard"],
    "gradient_accumulation_steps": 4
}' "json --create: last member, the object's indentation"
expect_eq "$(jq -c '[.per_device_train_batch_size, .gradient_accumulation_steps]' hf.json)" \
    "[8,4]" "json --create: values"
cp hf.json.orig hf.json
oom apply --plan "$PLAN" --preset hf-trainer --partial --no-backup hf.json
expect_rc 0 "json --partial"
expect_contains "$ERR" "hf.json: no 'gradient_accumulation_steps' (--partial): the effective \
batch changes from 4 to 8" "json --partial message"

# the other way round: the accumulation without the micro-batch
without per_device_train_batch_size "$D/hf_args.json" hf2.json
refused hf2.json hf-trainer "json: missing micro-batch"
expect_contains "$ERR" "'hf2.json' has 'gradient_accumulation_steps' but not \
'per_device_train_batch_size' (batch_size 8 in the plan): writing only the accumulation would \
silently change the effective batch from B x 8 to B x 4 (B: the micro-batch the job uses" \
    "missing micro-batch message"

# a DeepSpeed config with train_batch_size fixes the effective batch by itself: no refusal for
# the missing accumulation key (DeepSpeed derives it), and its 64 is kept
grep -v gradient_accumulation_steps "$D/ds_config.json" >ds.json
oom apply --plan "$PLAN" --preset deepspeed --no-backup ds.json
expect_rc 0 "deepspeed with train_batch_size, no accumulation key"
expect_eq "$(jq -c '[.train_batch_size, .train_micro_batch_size_per_gpu]' ds.json)" "[64,8]" \
    "deepspeed values: the file's effective batch kept"

# only the micro-batch assigned: the user leaves the accumulation alone
cp noacc.yaml.orig noacc.yaml
oom apply --plan "$PLAN" --set data_loader.batch_size=batch_size --no-backup noacc.yaml
expect_rc 0 "only the micro-batch assigned"

# ---- stale comments: reported with their line, left as they are ------------------------------
cp "$D/config.yaml" conf.yaml
oom apply --plan "$PLAN" --preset hydra-lightning --no-backup conf.yaml
expect_rc 1 "225 cannot be kept at the plan's micro-batch 8: refused"
oom apply --plan "$PLAN" --preset hydra-lightning --allow-effective-batch-change --no-backup conf.yaml
expect_rc 0 "stale comments: applied"
expect_contains "$ERR" "conf.yaml: the effective batch changes from 225 to 32, the plan's \
(--allow-effective-batch-change)" "the change, said"
expect_contains "$ERR" "conf.yaml:10: comment mentions effective batch 225; the new effective \
batch is 32" "stale comment on the batch line"
expect_contains "$ERR" "conf.yaml:24: comment mentions effective batch 225; the new effective \
batch is 32" "stale comment on the accumulation line"
expect_eq "$(grep -c 'Effective batch = 225' conf.yaml)" 2 "comments left as they are"

cat >c.yaml <<'EOF'
trainer:
  # 16 per GPU (bf16 on an A100), 80 in all; lr 2.5e-4
  batch_size: 16
  accumulate: 5   # x5 -> 80
  workers: 4      # 4 workers, unrelated
EOF
cp c.yaml c.orig
oom apply --plan "$PLAN" --set trainer.batch_size=batch_size --set trainer.accumulate=grad_accum \
    --json --no-backup c.yaml
expect_rc 0 "stale comments: own file"
# its 80 is kept (8 x 10): the comments that say 80 still hold
expect_json '[.files[0].notes[] | "\(.line): \(.message)"] | join("|")' \
    "null: the file's effective batch 80 is kept: micro-batch 8 x accumulation 10 x 1 GPU (the \
plan's accumulation was for an effective batch of 32; --allow-effective-batch-change writes it)|\
2: comment mentions 16, the old value of 'trainer.batch_size'; the new value is 8" \
    "stale comment notes, the effective batch kept"
cp c.orig c.yaml
oom apply --plan "$PLAN" --set trainer.batch_size=batch_size --set trainer.accumulate=grad_accum \
    --allow-effective-batch-change --json --no-backup c.yaml
expect_json '[.files[0].notes[] | "\(.line): \(.message)"] | join("|")' \
    "null: the effective batch changes from 80 to 32, the plan's (--allow-effective-batch-change)|\
2: comment mentions 16, the old value of 'trainer.batch_size'; the new value is 8|\
2: comment mentions effective batch 80; the new effective batch is 32|\
4: comment mentions effective batch 80; the new effective batch is 32" "stale comment notes"
expect_eq "$(diff c.orig c.yaml | grep -c '^>')" 2 "only the values changed"
expect_eq "$(sed -n 2p c.yaml)" "$(sed -n 2p c.orig)" "the comment line above is kept"

# a comment that names neither the old value nor the old effective batch is not reported
printf 'bs: 45  # fits 24 GB\nacc: 5\n' >d.yaml
oom apply --plan "$PLAN" --set bs=batch_size --set acc=grad_accum --allow-effective-batch-change \
    --no-backup d.yaml
expect_rc 0 "unrelated comment"
expect_not_contains "$ERR" "comment mentions" "unrelated comment: no note"

finish
