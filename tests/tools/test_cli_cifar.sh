#!/usr/bin/env bash
# End-to-end checks of the `kiln` command: CIFAR-10's binary format, `kiln quantize` of a CNN,
# stripped float weights, a truncated test file. One of the kiln_cli_* CTest tests, split so that
# CTest runs them side by side (tools/CMakeLists.txt).
# Usage: test_cli_cifar.sh path/to/kiln
set -euo pipefail

source "$(dirname "$0")/cli_test_lib.sh" "$1"

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
echo "kiln command (cifar10 and quantize): all checks passed"
