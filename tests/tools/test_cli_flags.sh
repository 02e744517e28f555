#!/usr/bin/env bash
# End-to-end checks of the `kiln` command: flag and command errors, progress in a log file, Ctrl-C
# and resume, eval of a test split alone. One of the kiln_cli_* CTest tests, split so that CTest
# runs them side by side (tools/CMakeLists.txt).
# Usage: test_cli_flags.sh path/to/kiln
set -euo pipefail

source "$(dirname "$0")/cli_test_lib.sh" "$1"

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
echo "kiln command (flags and interrupts): all checks passed"
