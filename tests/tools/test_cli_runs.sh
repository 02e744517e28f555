#!/usr/bin/env bash
# End-to-end checks of the `kiln` command: a short training run with every output file, --compile,
# eval, resume bit for bit, run-directory safety (schedules and the validation split:
# test_cli_schedules.sh).
# One of the kiln_cli_* CTest tests, split so that CTest runs them side by side
# (tools/CMakeLists.txt).
# Usage: test_cli_runs.sh path/to/kiln
set -euo pipefail

source "$(dirname "$0")/cli_test_lib.sh" "$1"

small=(--model mlp --train-samples 2048 --batch-size 256 --workers 2 --seed 3)
"$kiln" train "${small[@]}" --epochs 2 --out "$tmp/straight" >"$tmp/straight.log"
grep -q "Test accuracy: " "$tmp/straight.log" || fail "no test accuracy in the output"
# --compile runs each step as one graph (Note [compiled training step]) and trains as eager does.
"$kiln" train "${small[@]}" --epochs 2 --compile --out "$tmp/compiled" >"$tmp/compiled.log"
compiled_acc=$(grep -o "Test accuracy: [0-9.]*" "$tmp/compiled.log" | grep -o "[0-9.]*$")
straight_acc=$(grep -o "Test accuracy: [0-9.]*" "$tmp/straight.log" | grep -o "[0-9.]*$")
[[ -n $compiled_acc && $compiled_acc == "$straight_acc" ]] ||
  fail "kiln train --compile reached '$compiled_acc', eager '$straight_acc'"
for f in model.safetensors checkpoint history.csv curves.svg summary.txt metrics.json; do
  [[ -e "$tmp/straight/$f" ]] || fail "missing $f in the run directory"
done
[[ $(wc -l <"$tmp/straight/history.csv") -eq 3 ]] || fail "history.csv should have 2 epochs"
"$kiln" eval "$tmp/straight" >"$tmp/eval.log"
grep -q "accuracy" "$tmp/eval.log" || fail "eval printed no accuracy"
# The accuracy eval reports is the one training reported.
train_acc=$(grep -o "Test accuracy: [0-9.]*" "$tmp/straight.log" | grep -o "[0-9.]*$")
grep -q "accuracy ${train_acc}%" "$tmp/eval.log" || fail "eval disagrees with train ($train_acc)"

"$kiln" train "${small[@]}" --epochs 1 --out "$tmp/resumed" >/dev/null
"$kiln" train "${small[@]}" --epochs 2 --out "$tmp/resumed" --resume >"$tmp/resume.log"
grep -q "Resuming from" "$tmp/resume.log" || fail "resume did not resume"
cmp "$tmp/straight/model.safetensors" "$tmp/resumed/model.safetensors" ||
  fail "1 epoch + resume + 1 epoch differs from 2 epochs"
[[ $(wc -l <"$tmp/resumed/history.csv") -eq 3 ]] || fail "resumed history.csv should have 2 epochs"
# Issue 16, defects 1-3: a run directory is never replaced or silently restarted, a resumed run
# takes its settings from the record and refuses changed ones, and a schedule is never run past
# its end.
expect_error "pass --resume to continue it, or --overwrite to replace it" \
  train "${small[@]}" --epochs 1 --out "$tmp/straight"
cp "$tmp/straight/history.csv" "$tmp/history.before"
expect_error "--lr 0.01 (the run used 0.001)" train --lr 0.01 --out "$tmp/straight" --resume
expect_error "--model cnn on --data fashion-mnist" train --model cnn --out "$tmp/straight" --resume
cmp "$tmp/history.before" "$tmp/straight/history.csv" || fail "a refused resume changed history.csv"
grep -q '"train_samples": 2048' "$tmp/straight/config.json" || fail "config.json lacks train_samples"
# Settings come from the record: no flag retyped, 2048 samples in steps of 256, as recorded.
"$kiln" train --out "$tmp/resumed" --resume --epochs 3 >"$tmp/resume3.log"
grep -q "^8/8 " "$tmp/resume3.log" || fail "resume did not take --train-samples/--batch-size from the record"
[[ $(wc -l <"$tmp/resumed/history.csv") -eq 4 ]] || fail "history.csv should have 3 epochs"
"$kiln" train --out "$tmp/resumed" --resume --seed 9 --override >"$tmp/override.log"
grep -q "Continuing with changed settings (--override): --seed 9 (the run used 3)" \
  "$tmp/override.log" || fail "--override did not say what changed: $(head -3 "$tmp/override.log")"
# history.csv is the checkpoint's history: a row lost to a kill between the two comes back.
head -n 3 "$tmp/resumed/history.csv" >"$tmp/cut.csv" && mv "$tmp/cut.csv" "$tmp/resumed/history.csv"
"$kiln" train --out "$tmp/resumed" --resume >/dev/null
[[ $(wc -l <"$tmp/resumed/history.csv") -eq 4 ]] || fail "resume did not rebuild history.csv"
[[ $(sed -n 2p "$tmp/resumed/history.csv") == 1,* ]] || fail "history.csv epochs should count from 1"
# A missing checkpoint: --resume changes nothing; --overwrite starts over.
mv "$tmp/straight/checkpoint" "$tmp/checkpoint.away"
expect_error "no complete checkpoint" train --out "$tmp/straight" --resume
cmp "$tmp/history.before" "$tmp/straight/history.csv" || fail "a resume without checkpoint changed history.csv"
touch "$tmp/straight/model.safetensors.tmp.4242"
"$kiln" train "${small[@]}" --epochs 1 --out "$tmp/straight" --overwrite >/dev/null
[[ ! -e "$tmp/straight/model.safetensors.tmp.4242" ]] || fail "a stale temporary file stayed"
[[ $(wc -l <"$tmp/straight/history.csv") -eq 2 ]] || fail "--overwrite kept the old history"
echo "kiln command (training runs and resumes): all checks passed"
