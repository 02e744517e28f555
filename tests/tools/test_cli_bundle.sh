#!/usr/bin/env bash
# End-to-end checks of the saved-model commands (tools/bundle_commands.h): kiln export, inspect,
# run, and predict on a bundle. Every command here is its own process, so the bundle is loaded by
# a program that never built the model. One of the kiln_cli_* CTest tests (tools/CMakeLists.txt).
# Usage: test_cli_bundle.sh path/to/kiln
set -euo pipefail

source "$(dirname "$0")/cli_test_lib.sh" "$1"
py=/usr/bin/python3

"$kiln" train --model cnn --train-samples 512 --batch-size 128 --epochs 1 --seed 3 \
  --out "$tmp/run" >"$tmp/train.log" 2>&1 || fail "train: $(tail -3 "$tmp/train.log")"

# --- export and inspect -------------------------------------------------------------------------
"$kiln" export "$tmp/run" --out "$tmp/bundle" >"$tmp/export.log" || fail "export: $(cat "$tmp/export.log")"
grep -q "serving_default: x: float32\[-1 (batch), 1, 28, 28\] -> logits: float32\[-1 (batch), 10\]" \
  "$tmp/export.log" || fail "export printed: $(cat "$tmp/export.log")"
for f in saved_model.json graphs.json variables.safetensors assets/classes.txt assets/data_info.json; do
  [[ -f "$tmp/bundle/$f" ]] || fail "the bundle lacks $f"
done
[[ $(wc -l <"$tmp/bundle/assets/classes.txt") -eq 10 ]] || fail "classes.txt should name 10 classes"
"$kiln" inspect "$tmp/bundle" >"$tmp/inspect.txt"
for line in "signature_def['serving_default']:" \
  "  The given SavedModel SignatureDef contains the following input(s):" \
  "    inputs['x'] tensor_info:" "        dtype: float32" "        shape: (-1, 1, 28, 28)" \
  "        dims: (batch, 1, 28, 28)" "    outputs['logits'] tensor_info:" "        shape: (-1, 10)" \
  "  Method name is: predict"; do
  grep -qxF -- "$line" "$tmp/inspect.txt" || fail "inspect lacks the line '$line': $(cat "$tmp/inspect.txt")"
done
grep -q "precision float32" "$tmp/inspect.txt" || fail "inspect does not show the precision"
grep -q '"model": "cnn"' "$tmp/inspect.txt" || fail "inspect does not show the metadata"
# Every file's content hash is the digest sha256sum prints (Note [content hash]).
for f in graphs.json variables.safetensors assets/classes.txt; do
  digest=$(sha256sum "$tmp/bundle/$f" | cut -d' ' -f1)
  grep -qE "^  $f +[0-9]+ bytes  sha256 $digest\$" "$tmp/inspect.txt" ||
    fail "inspect does not list $f with sha256 $digest: $(cat "$tmp/inspect.txt")"
done
expect_error "already holds a saved model; pass --overwrite" export "$tmp/run" --out "$tmp/bundle"
"$kiln" export "$tmp/run" --out "$tmp/bundle" --overwrite >/dev/null
expect_error "expected a training directory" export "$tmp" --out "$tmp/b2"
expect_error "no saved model at" inspect "$tmp/nothing"
expect_error "has no signature 'train'; it has serving_default" inspect "$tmp/bundle" --signature train

# --- run: .npy and .npz inputs, outputs as .npy and .npz ------------------------------------------
"$py" - "$tmp" <<'PY'
import sys, numpy as np
d = sys.argv[1]
x = np.random.default_rng(0).standard_normal((5, 1, 28, 28)).astype(np.float32)
np.save(d + "/x.npy", x)
np.savez_compressed(d + "/inputs.npz", x=x)
np.save(d + "/x64.npy", x.astype(np.float64))
np.save(d + "/wide.npy", np.zeros((2, 1, 28, 29), np.float32))
imgs = (np.random.default_rng(1).random((4, 28, 28)) * 255).astype(np.uint8)
np.save(d + "/images.npy", imgs)
PY
"$kiln" run "$tmp/bundle" --input x="$tmp/x.npy" --out "$tmp/out1" >"$tmp/run1.log"
grep -q "logits: float32\[5, 10\] -> " "$tmp/run1.log" || fail "run printed: $(cat "$tmp/run1.log")"
"$kiln" run "$tmp/bundle" --input "$tmp/inputs.npz" --out "$tmp/out2" >/dev/null
"$kiln" run "$tmp/bundle" --signature serving_default --input "$tmp/x.npy" --out "$tmp/out3" >/dev/null
cmp "$tmp/out1/logits.npy" "$tmp/out2/logits.npy" || fail "the .npz input gave other logits"
cmp "$tmp/out1/logits.npy" "$tmp/out3/logits.npy" || fail "the unnamed .npy input gave other logits"
"$py" - "$tmp" <<'PY' || fail "NumPy disagrees with kiln run's outputs"
import sys, numpy as np
d = sys.argv[1]
with np.load(d + "/out1/outputs.npz", allow_pickle=False) as z:
    assert z.files == ["logits"], z.files
    a = z["logits"]
b = np.load(d + "/out1/logits.npy")
assert a.shape == (5, 10) and a.dtype == np.float32, (a.shape, a.dtype)
assert np.array_equal(a, b) and np.isfinite(a).all()
PY
expect_error "has no input 'y'" run "$tmp/bundle" --input y="$tmp/x.npy" --out "$tmp/o"
expect_error "float64" run "$tmp/bundle" --input x="$tmp/x64.npy" --out "$tmp/o"
expect_error "29" run "$tmp/bundle" --input x="$tmp/wide.npy" --out "$tmp/o"
expect_error "is given twice" run "$tmp/bundle" --input x="$tmp/x.npy" --input "$tmp/inputs.npz" --out "$tmp/o"
expect_error "NAME=FILE takes a .npy file" run "$tmp/bundle" --input x="$tmp/inputs.npz" --out "$tmp/o"
printf 'not a zip' >"$tmp/bad.npz"
expect_error "not a zip archive" run "$tmp/bundle" --input "$tmp/bad.npz" --out "$tmp/o"

# --- a bundle with a training signature: its loss and gradients through kiln run -----------------
"$kiln" export "$tmp/run" --out "$tmp/bundle_train" --with-training >"$tmp/export_t.log" ||
  fail "export --with-training: $(cat "$tmp/export_t.log")"
grep -Eq "train: x, target -> loss and the gradients of [0-9]+ parameters" "$tmp/export_t.log" ||
  fail "export --with-training printed: $(cat "$tmp/export_t.log")"
"$kiln" inspect "$tmp/bundle_train" --signature train >"$tmp/inspect_t.txt"
for line in "signature_def['train']:" "    inputs['target'] tensor_info:" "        dtype: int64" \
  "    outputs['loss'] tensor_info:" "    outputs['gradient/fc2.weight'] tensor_info:" \
  "  Method name is: train" "    outputs['gradient/fc2.weight'] = d loss / d fc2.weight"; do
  grep -qxF -- "$line" "$tmp/inspect_t.txt" || fail "inspect lacks the line '$line': $(cat "$tmp/inspect_t.txt")"
done
"$py" -c "import numpy as np, sys; np.save(sys.argv[1], np.array([0, 3, 9, 1, 1], np.int64))" "$tmp/target.npy"
"$kiln" run "$tmp/bundle_train" --signature train --input x="$tmp/x.npy" --input target="$tmp/target.npy" \
  --out "$tmp/out_t" >"$tmp/run_t.log" 2>&1 || fail "run --signature train: $(cat "$tmp/run_t.log")"
"$py" - "$tmp" <<'PY' || fail "the training signature's outputs are wrong"
import sys, numpy as np
d = sys.argv[1]
with np.load(d + "/out_t/outputs.npz", allow_pickle=False) as z:
    names = z.files
    loss = z["loss"]
    g = z["gradient/fc2.weight"]
assert loss.shape == () and np.isfinite(loss) and loss > 0, loss
assert g.ndim == 2 and g.shape[0] == 10, g.shape
assert np.isfinite(g).all() and np.abs(g).sum() > 0
assert len([n for n in names if n.startswith("gradient/")]) >= 10, names
PY
expect_error "exports a float32 training step" export "$tmp/run" --out "$tmp/bundle_t16" --with-training --precision bf16

# --- kiln quantize --bundle: an int8 bundle that predicts as the quantized run does ---------------
"$kiln" quantize "$tmp/run" --calibration-samples 64 --out "$tmp/run8" --bundle "$tmp/bundle8" \
  >"$tmp/q.log" 2>&1 || fail "quantize --bundle: $(tail -3 "$tmp/q.log")"
"$kiln" inspect "$tmp/bundle8" >"$tmp/inspect8.txt"
grep -q "precision int8" "$tmp/inspect8.txt" || fail "the quantized bundle: $(head -3 "$tmp/inspect8.txt")"
"$kiln" predict "$tmp/run8" --input "$tmp/images.npy" --top-k 3 --out "$tmp/run8.json" >/dev/null
"$kiln" predict "$tmp/bundle8" --input "$tmp/images.npy" --top-k 3 --out "$tmp/bundle8.json" >/dev/null
cmp "$tmp/run8.json" "$tmp/bundle8.json" || fail "the int8 bundle predicts otherwise than the int8 run"

# --- predict: the bundle classifies as the run does, without the run directory ---------------------
"$kiln" predict "$tmp/run" --input "$tmp/images.npy" --top-k 3 --out "$tmp/run_pred.json" >/dev/null
mv "$tmp/run" "$tmp/run.away"  # the bundle needs nothing of the run
"$kiln" predict "$tmp/bundle" --input "$tmp/images.npy" --top-k 3 --out "$tmp/bundle_pred.json" >/dev/null
cmp "$tmp/run_pred.json" "$tmp/bundle_pred.json" || fail "predict on the bundle differs from the run's"
expect_error "--weights applies to a training directory" \
  predict "$tmp/bundle" --input "$tmp/images.npy" --weights "$tmp/w.safetensors"
mv "$tmp/run.away" "$tmp/run"

# --- bf16: traced under autocast --------------------------------------------------------------------
"$kiln" export "$tmp/run" --precision bf16 --out "$tmp/bundle16" >"$tmp/export16.log"
"$kiln" inspect "$tmp/bundle16" >"$tmp/inspect16.txt"  # (grep -q on a pipe would cut it off)
grep -q "precision bf16-autocast" "$tmp/inspect16.txt" || fail "the bf16 bundle's precision"
grep -q "to_dtype" "$tmp/bundle16/graphs.json" || fail "the bf16 graph has no casts"
"$kiln" predict "$tmp/bundle16" --input "$tmp/images.npy" --out "$tmp/bundle16.json" >/dev/null
echo "kiln command (export, inspect, run, predict on bundles): all checks passed"
