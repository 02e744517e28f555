#!/usr/bin/env bash
# End-to-end checks of the `kiln` command: --precision (bf16, fp16, compiled fp16, the float32
# fallback) and int8 on real data, each against a float32 run of the same model. One of the
# kiln_cli_* CTest tests, split so that CTest runs them side by side (tools/CMakeLists.txt).
# Usage: test_cli_precision.sh path/to/kiln
set -euo pipefail

source "$(dirname "$0")/cli_test_lib.sh" "$1"

small=(--model mlp --train-samples 2048 --batch-size 256 --workers 2 --seed 3)
"$kiln" train "${small[@]}" --epochs 2 --out "$tmp/straight" >"$tmp/straight.log"
straight_acc=$(grep -o "Test accuracy: [0-9.]*" "$tmp/straight.log" | grep -o "[0-9.]*$")
[[ -n $straight_acc ]] || fail "no test accuracy in the float32 run: $(tail -3 "$tmp/straight.log")"
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
echo "kiln command (precision): all checks passed"
