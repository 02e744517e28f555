#!/usr/bin/env bash
# End-to-end checks of the `kiln` command: a schedule is never run past its end (and --override
# continues it), the Keras-style validation split. One of the kiln_cli_* CTest tests, split so
# that CTest runs them side by side (tools/CMakeLists.txt).
# Usage: test_cli_schedules.sh path/to/kiln
set -euo pipefail

source "$(dirname "$0")/cli_test_lib.sh" "$1"

small=(--model mlp --train-samples 2048 --batch-size 256 --workers 2 --seed 3)
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
echo "kiln command (schedules, validation split): all checks passed"
