#!/usr/bin/env bash
# End-to-end checks of the `kiln` command: flag errors, a short training run with every output
# file, eval of the run's directory, and a resume that reproduces an uninterrupted run bit for bit.
# Usage: test_cli.sh path/to/kiln
set -euo pipefail
kiln="$1"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

source "$(dirname "$0")/cli_test_lib.sh"

expect_error "--model" train --model vgg
expect_error "--epochs" train --epochs 0
expect_error "--optimizer" train --optimizer lbfgs
expect_error "--lr" train --lr -1
expect_error "--bogus" train --bogus
# Numeric flags: NaN, infinities and words are refused by name, bounds print as written, a
# negative seed does not wrap, and no message ends in a C++ call site of the command itself.
expect_error "--lr: expected a finite number, but got 'nan'" train --lr nan
expect_error "--lr: expected a finite number, but got 'inf'" train --lr inf
expect_error "--lr: 'abc' is not a number" train --lr abc
expect_error "--lr: expected a number > 0, but got 0" train --lr 0
expect_error "--momentum: expected a finite number, but got 'nan'" train --momentum nan
expect_error "--momentum: expected a number <= 1, but got 1.5" train --momentum 1.5
expect_error "--weight-decay: expected a number >= 0, but got -1" train --weight-decay -1
expect_error "--seed: expected a whole number >= 0, but got '-1'" train --seed -1
expect_error "--train-samples: expected a whole number >= 0, but got '-5'" train --train-samples -5
if out=$("$kiln" train --weight-decay -1 2>&1); [[ $out == *179769313* ]]; then
  fail "a bound printed as the largest double: $out"
fi
expect_error "A subcommand is required" 
expect_error "does not exist" eval "$tmp/nowhere"
mkdir "$tmp/empty"
expect_error "$tmp/empty" train --model mlp --data-dir "$tmp/empty" --out "$tmp/x"
out=$("$kiln" train --model mlp --data-dir "$tmp/empty" --out "$tmp/x" 2>&1) || true
[[ $out != *" — at "* ]] || fail "a command error names a line of the command's source: $out"

# Progress reaches a log file while the run is still going (line-buffered output).
"$kiln" train --model mlp --train-samples 20000 --batch-size 100 --epochs 3 --out "$tmp/live" \
  >"$tmp/live.log" 2>&1 &
live=$!
seen=0
for _ in $(seq 600); do
  if grep -q "^[0-9]*/200 " "$tmp/live.log"; then
    kill -0 "$live" 2>/dev/null && seen=1
    break
  fi
  kill -0 "$live" 2>/dev/null || break
  sleep 0.05
done
((seen)) || fail "no progress line in the log while the run was going: $(head -c 400 "$tmp/live.log")"
# Ctrl-C once the first epoch is checkpointed: exit 130, saying where the checkpoint is and how to
# resume (issue 16, defect 8).
for _ in $(seq 600); do
  grep -q "^Epoch 2/3" "$tmp/live.log" && break
  kill -0 "$live" 2>/dev/null || break
  sleep 0.05
done
kill -INT "$live" 2>/dev/null || true
status=0
wait "$live" || status=$?
grep -q "^Epoch 2/3" "$tmp/live.log" && ((status != 0)) ||
  fail "the run ended before Ctrl-C could be tested (status $status)"
((status == 130)) || fail "Ctrl-C: exit status $status, expected 130"
grep -q "after epoch [12] of 3, is in $tmp/live/checkpoint; continue with: kiln train --out $tmp/live --resume" \
  "$tmp/live.log" || fail "Ctrl-C said nothing useful: $(tail -3 "$tmp/live.log")"
"$kiln" train --out "$tmp/live" --resume >"$tmp/live2.log" || fail "resume after Ctrl-C failed"
grep -q "Resuming from" "$tmp/live2.log" || fail "no resume after Ctrl-C"
# eval reads only the test split: a directory without the training files will do.
mkdir "$tmp/test_only"
cp /usr/share/datasets/fashion-mnist/t10k-* "$tmp/test_only/"
"$kiln" eval "$tmp/live" --data-dir "$tmp/test_only" | grep -q "accuracy" ||
  fail "kiln eval needs the training files"
expect_error "cifar-10-binary.tar.gz" train --data cifar10 --out "$tmp/c0"

"$kiln" summary --model cnn >"$tmp/summary.txt"
grep -q "421,834" "$tmp/summary.txt" || fail "summary lacks the cnn's parameter count"

# kiln graph: text, JSON, DOT and (graphviz is a setup package) SVG of a traced model.
"$kiln" graph --model cnn --out "$tmp/graph" >"$tmp/graph.log"
grep -Eq "[0-9]+ nodes, [0-9]+ captures" "$tmp/graph.log" || fail "kiln graph: $(cat "$tmp/graph.log")"
grep -Eq "= conv2d(_affine)?\(%0, %[0-9]+" "$tmp/graph/graph.txt" ||
  fail "graph.txt lacks the first convolution: $(head -5 "$tmp/graph/graph.txt")"
grep -q "x: float32\[batch, 1, 28, 28\]" "$tmp/graph/graph.txt" || fail "graph.txt lacks the symbolic input"
grep -q '"format": "kiln.graph"' "$tmp/graph/graph.json" || fail "graph.json is not a kiln.graph document"
grep -q "^digraph" "$tmp/graph/graph.dot" || fail "graph.dot is not DOT"
grep -q "<svg" "$tmp/graph/graph.svg" || fail "graph.svg is not SVG"
grep -q "conv1.weight" "$tmp/graph/graph.svg" || fail "graph.svg does not name the captures"
"$kiln" graph --model resnet18 --data cifar10 --mode train --out "$tmp/graph_rn" >"$tmp/graph_rn.log"
grep -q "running_stat_update" "$tmp/graph_rn/graph.txt" || fail "a training-mode graph updates running statistics"
# --freeze folds each batch norm into its convolution's scale and shift once (Note [graph passes]).
"$kiln" graph --model cnn --freeze --out "$tmp/graph_frozen" >"$tmp/graph_frozen.log"
grep -q "optimized: .* nodes -> " "$tmp/graph_frozen.log" || fail "kiln graph prints no pass report"
grep -q "conv_bn_fold" "$tmp/graph/graph.txt" || fail "an unfrozen graph folds batch norms per call"
! grep -q "conv_bn_fold" "$tmp/graph_frozen/graph.txt" || fail "--freeze left conv_bn_fold nodes"
expect_error "unknown pass 'cs'" graph --model cnn --skip-passes cs --out "$tmp/g3"
expect_error "--freeze is for inference" graph --model cnn --mode train --freeze --out "$tmp/g4"
expect_error "--out" graph --model cnn
expect_error "--mode" graph --mode predict --out "$tmp/g2"

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
# Schedules: a longer run is refused, and --override continues at a nonzero rate (cosine) and
# without a crash (one-cycle).
for schedule in cosine onecycle; do
  "$kiln" train "${small[@]}" --optimizer sgd --lr 0.05 --schedule "$schedule" --epochs 2 \
    --out "$tmp/$schedule" >/dev/null
  expect_error "spans the run's --epochs 2" train --out "$tmp/$schedule" --resume --epochs 3
  cp "$tmp/$schedule/model.safetensors" "$tmp/$schedule.2"
  "$kiln" train --out "$tmp/$schedule" --resume --epochs 3 --override >"$tmp/$schedule.log"
  ! cmp -s "$tmp/$schedule.2" "$tmp/$schedule/model.safetensors" ||
    fail "--schedule $schedule: the third epoch left the weights unchanged (lr 0)"
  [[ $(wc -l <"$tmp/$schedule/history.csv") -eq 4 ]] || fail "$schedule: expected 3 epochs"
done

# Keras-style validation split: 2048 * 0.25 = 512 samples held out (6 steps of 256 remain).
"$kiln" train --model mlp --train-samples 2048 --batch-size 256 --epochs 1 --validation-split 0.25 \
  --out "$tmp/split" >"$tmp/split.log"
grep -q "^6/6 " "$tmp/split.log" || fail "validation split: expected 6 training steps of 256"
expect_error "--validation-split" train --validation-split 1.5

# CIFAR-10 in its binary format (random pixels, 64 records per file): the CNN builds for 3x32x32.
mkdir "$tmp/cifar"
for f in data_batch_1 data_batch_2 data_batch_3 data_batch_4 data_batch_5 test_batch; do
  python3 -c "import os, sys
sys.stdout.buffer.write(b''.join(bytes([i % 10]) + os.urandom(3072) for i in range(64)))" \
    >"$tmp/cifar/$f.bin"
done
expect_error "needs --data-dir" train --data cifar10 --out "$tmp/c"
"$kiln" train --model cnn --data cifar10 --data-dir "$tmp/cifar" --epochs 1 --batch-size 64 \
  --augment --out "$tmp/c" >"$tmp/cifar.log"
grep -q "Test accuracy: .*(loss .*, 64 samples, test split)" "$tmp/cifar.log" || fail "cifar10 run: $(tail -3 "$tmp/cifar.log")"
"$kiln" eval "$tmp/c" | grep -q "cnn on cifar10" || fail "eval of the cifar10 run"
# kiln quantize on a CNN (its batch norms folded into int8 convolutions), then eval and predict of
# the quantized copy.
"$kiln" quantize "$tmp/c" --calibration-samples 64 --out "$tmp/c8" >"$tmp/c8.log" 2>&1 ||
  fail "quantize of the cifar10 cnn: $(tail -3 "$tmp/c8.log")"
grep -q "Quantized 4 of the model's convolution and linear layers" "$tmp/c8.log" ||
  fail "the cnn's quantization: $(cat "$tmp/c8.log")"
c8_acc=$(grep -o "^int8 *[0-9.]*%" "$tmp/c8.log" | grep -o "[0-9.]*%")
"$kiln" eval "$tmp/c8" | grep -q "accuracy $c8_acc" || fail "eval of the quantized cnn disagrees ($c8_acc)"
[[ -f $tmp/c8/quantization.json ]] || fail "no quantization.json"
# The float32 weights are stripped by default (Note [stripped float weights]); --keep-float keeps
# them: the same int8 accuracy, a file more than twice the size.
grep -q "float32 tensors stripped" "$tmp/c8.log" || fail "no stripping reported: $(cat "$tmp/c8.log")"
"$kiln" quantize "$tmp/c" --calibration-samples 64 --out "$tmp/c8f" --keep-float >"$tmp/c8f.log" 2>&1 ||
  fail "quantize --keep-float: $(tail -3 "$tmp/c8f.log")"
"$kiln" eval "$tmp/c8f" | grep -q "accuracy $c8_acc" || fail "eval of the --keep-float copy disagrees"
stripped_bytes=$(stat -c %s "$tmp/c8/checkpoint/model.safetensors")
kept_bytes=$(stat -c %s "$tmp/c8f/checkpoint/model.safetensors")
((stripped_bytes * 2 < kept_bytes)) ||
  fail "the stripped copy ($stripped_bytes bytes) is not under half the kept one ($kept_bytes)"
expect_error "already quantized" quantize "$tmp/c8" --out "$tmp/c88"
expect_error "already exists; pass --overwrite" quantize "$tmp/c" --out "$tmp/c8"
expect_error "--observer" quantize "$tmp/c" --observer entropy
expect_error "does not exist" quantize "$tmp/nowhere"
head -c 5000 "$tmp/cifar/test_batch.bin" >"$tmp/cifar/truncated.bin"
mv "$tmp/cifar/truncated.bin" "$tmp/cifar/test_batch.bin"
expect_error "test_batch.bin" eval "$tmp/c" --data-dir "$tmp/cifar"
# --precision (Note [training precision]). KILN_NATIVE_LOW_PRECISION=1 makes any CPU count as
# having native kernels, so both branches run everywhere.
expect_error "--precision" train --precision int8
KILN_NATIVE_LOW_PRECISION=1 "$kiln" train "${small[@]}" --epochs 2 --precision mixed_bfloat16 \
  --out "$tmp/bf16" >"$tmp/bf16.log" 2>&1 || fail "bf16 run: $(tail -3 "$tmp/bf16.log")"
grep -q "Precision: mixed_bfloat16 (compute in bfloat16, variables in float32)" "$tmp/bf16.log" ||
  fail "bf16 run did not say its precision"
grep -q "Compute dtype: bfloat16, variable dtype: float32" "$tmp/bf16/summary.txt" ||
  fail "the bf16 summary shows no compute dtype"
bf16_train=$(grep -o "Test accuracy: [0-9.]*" "$tmp/bf16.log" | grep -o "[0-9.]*$")
KILN_NATIVE_LOW_PRECISION=1 "$kiln" eval "$tmp/bf16" | grep -q "accuracy ${bf16_train}%" ||
  fail "eval of the bf16 run disagrees with its training ($bf16_train)"
bf16_acc=$(grep -o "Test accuracy: [0-9.]*" "$tmp/bf16.log" | grep -o "[0-9.]*$")
python3 -c "import sys; sys.exit(abs($bf16_acc - $straight_acc) > 3.0)" ||
  fail "bf16 reached $bf16_acc%, float32 $straight_acc%"
KILN_NATIVE_LOW_PRECISION=1 "$kiln" train "${small[@]}" --epochs 1 --precision fp16 \
  --out "$tmp/fp16" >"$tmp/fp16.log" 2>&1 || fail "fp16 run: $(tail -3 "$tmp/fp16.log")"
head -1 "$tmp/fp16/history.csv" | grep -q "loss_scale" || fail "fp16 history has no loss_scale"
grep -rqs "grad_scaler" "$tmp/fp16/checkpoint" || fail "the fp16 checkpoint holds no scaler state"
# Compiled float16 (Note [loss scaling in compiled steps]): the graph's gradients go through the
# same GradScaler, logged and checkpointed as in the eager run.
KILN_NATIVE_LOW_PRECISION=1 "$kiln" train "${small[@]}" --epochs 1 --precision fp16 --compile \
  --out "$tmp/fp16c" >"$tmp/fp16c.log" 2>&1 || fail "compiled fp16 run: $(tail -3 "$tmp/fp16c.log")"
head -1 "$tmp/fp16c/history.csv" | grep -q "loss_scale" || fail "compiled fp16 history has no loss_scale"
grep -rqs "grad_scaler" "$tmp/fp16c/checkpoint" || fail "the compiled fp16 checkpoint holds no scaler state"
KILN_NATIVE_LOW_PRECISION=0 "$kiln" train "${small[@]}" --epochs 1 --precision fp16 \
  --out "$tmp/fp16_off" >"$tmp/fp16_off.log" 2>&1 || fail "fp16 fallback run failed"
grep -q "no native kernels on this CPU: computing in float32" "$tmp/fp16_off.log" ||
  fail "the fp16 run on a CPU without native kernels did not say it fell back"
# int8 on real data: the MLP's accuracy moves by less than a point.
"$kiln" quantize "$tmp/straight" --calibration-samples 512 >"$tmp/q.log" 2>&1 ||
  fail "quantize: $(tail -3 "$tmp/q.log")"
q_change=$(grep -o "Accuracy change: [-+0-9.]*" "$tmp/q.log" | grep -o "[-+0-9.]*$")
python3 -c "import sys; sys.exit(abs(float('$q_change')) > 1.0)" ||
  fail "int8 changed the MLP's accuracy by $q_change points"
"$kiln" eval "$tmp/straight-int8" | grep -q "mlp on fashion-mnist" || fail "eval of the int8 MLP"
echo "kiln command: all checks passed"
