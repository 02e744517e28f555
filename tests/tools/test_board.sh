#!/usr/bin/env bash
# `kiln board` for real: a short training run and the board started beside it, the API seen
# updating while the run trains, the page loaded in headless Chromium (its DOM after the scripts
# ran, and a screenshot checked for the curves' colours), bad and hostile requests answered
# without harm, and bad run directories reported. Every wait is bounded.
# Usage: test_board.sh path/to/kiln [screenshot.png]
set -euo pipefail
shot_copy="${2:-${KILN_BOARD_SCREENSHOT:-}}"
source "$(dirname "$0")/cli_test_lib.sh" "$1"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  rm -rf "$tmp"
}
trap cleanup EXIT
py=/usr/bin/python3
chrome=(timeout 90 chromium --headless=new --no-sandbox --disable-gpu --hide-scrollbars
  --no-first-run --user-data-dir="$tmp/chrome")

# A finished run to overlay (b), a run with corrupt files (c), and a run training now (a).
"$kiln" train --model mlp --epochs 2 --train-samples 1000 --batch-size 100 --out "$tmp/b" >/dev/null 2>&1 ||
  fail "training run b"
mkdir -p "$tmp/c"
printf '{"settings": ' >"$tmp/c/config.json"
printf 'nonsense;;\n1,abc\n2,' >"$tmp/c/history.csv"
# A step row being written (no newline yet) is not shown; a hostile report is shown as text.
printf 'step,epoch,loss,lr,samples_per_second\n1,1,2.3,0.001,100\n2,1,2.2,0.0' >"$tmp/c/steps.csv"
printf '{"epoch": "<b>x</b>", "class_names": ["<script>alert(1)</script>"], "confusion": ["<i>"], "samples": "<u>"}' \
  >"$tmp/c/validation.json"
# A run written before steps.csv, validation.json and the lr column existed.
mkdir -p "$tmp/old"
printf '{"settings": {"model": "cnn", "epochs": 2}}' >"$tmp/old/config.json"
printf 'epoch,accuracy,loss,val_accuracy,val_loss\n1,0.5,1.2,0.6,1.0\n2,0.7,0.8,0.72,0.75\n' >"$tmp/old/history.csv"
mkdir -p "$tmp/a"  # the board is started before the run has written anything
"$kiln" train --epochs 3 --train-samples 4000 --batch-size 50 --out "$tmp/a" >"$tmp/a.log" 2>&1 &
train_pid=$!
pids+=("$train_pid")

"$kiln" board "$tmp/a" "$tmp/b" "$tmp/c" "$tmp/old" --port 0 >"$tmp/board.log" 2>&1 &
board_pid=$!
pids+=("$board_pid")
port=""
for _ in $(seq 100); do
  port=$(grep -o "http://127.0.0.1:[0-9]*/" "$tmp/board.log" | grep -o "[0-9]*/$" | tr -d / || true)
  [[ -n $port ]] && break
  sleep 0.1
done
[[ -n $port ]] || fail "the board did not start: $(cat "$tmp/board.log")"
url="http://127.0.0.1:$port"
get() { curl -s --max-time 10 "$@"; }

# Live: the API reports steps of run a while it is still training.
live=0
for _ in $(seq 1200); do
  state=$(get "$url/api/runs" | "$py" -c "import json,sys; r=json.load(sys.stdin)[0]; print(r['status'], r['steps_total'])" || true)
  if [[ $state == training\ [1-9]* ]]; then live=1; break; fi
  kill -0 "$train_pid" 2>/dev/null || break
  sleep 0.1
done
((live)) || fail "never saw run a training through /api/runs (last: $state)"
timeout 300 tail --pid="$train_pid" -f /dev/null || fail "training run a did not finish"
wait "$train_pid" || fail "training run a: $(tail -3 "$tmp/a.log")"
get "$url/api/runs" >"$tmp/runs.json"
"$py" - "$tmp/runs.json" <<'EOF' || fail "/api/runs: $(head -c 600 "$tmp/runs.json")"
import json, sys
a, b, c, old = json.load(open(sys.argv[1]))
assert (a["name"], a["status"], a["epoch"], a["epochs"], a["steps_total"]) == ("a", "finished", 3, 3, 240), a
assert a["report_source"] == "test" and len(a["history"]["lr"]) == 3
assert c["steps_total"] == 1 and c["steps"]["loss"] == [2.3], c["steps"]  # the partial row left out
assert any("config.json: not valid JSON" in n for n in c["notes"]), c["notes"]
assert any("history.csv: no epoch column" in n for n in c["notes"]), c["notes"]
assert old["history"]["val_accuracy"] == [0.6, 0.72] and old["steps"] == {}, old
assert any("steps.csv: not written" in n for n in old["notes"]), old["notes"]
EOF

# The page after its scripts ran: curves, the runs' numbers, classes and configuration.
"${chrome[@]}" --virtual-time-budget=10000 --dump-dom "$url/" >"$tmp/dom.html" 2>"$tmp/chrome.err" ||
  fail "chromium --dump-dom: $(tail -3 "$tmp/chrome.err")"
acc=$("$py" -c "import json; print('%.2f%%' % (100 * json.load(open('$tmp/a/metrics.json'))['test']['accuracy']))")
grep -q "test accuracy <b>$acc</b>" "$tmp/dom.html" || fail "test accuracy $acc not on the page"
! grep -q "<script>alert" "$tmp/dom.html" || fail "a run's file injected markup into the page"
grep -qF "&lt;script&gt;alert(1)&lt;/script&gt;" "$tmp/dom.html" || fail "a hostile class name not shown as text"
for text in "Loss per step" "Accuracy per epoch" "Learning rate per epoch" "Training samples/s" "Ankle boot" \
  "Confusion matrix" "config.json: not valid JSON" "history.csv: no epoch column" "SmallCnn" ">finished<"; do
  grep -qF "$text" "$tmp/dom.html" || fail "'$text' not on the page"
done
polylines=$(grep -o "<polyline" "$tmp/dom.html" | wc -l)
((polylines >= 11)) || fail "expected the curves of runs a and b, got $polylines polylines"
"$py" - "$tmp/dom.html" <<'EOF' || fail "curves or config missing in the DOM"
import re, sys
dom = open(sys.argv[1]).read()
# the per-step loss of run a: one series with every step of its 3 x 80 steps
points = [int(n) for n in re.findall(r'data-label="a loss" data-points="(\d+)"', dom)]
assert points and max(points) == 240, points
assert re.search(r'<td class="key">batch_size</td><td>50</td>', dom), "batch size of a"
assert re.search(r'<td class="key">model</td><td>mlp</td>', dom), "model of b"
EOF

# The screenshot: a real render with both runs' colours on the curves.
"${chrome[@]}" --window-size=1400,2600 --virtual-time-budget=10000 --screenshot="$tmp/board.png" \
  "$url/" >/dev/null 2>>"$tmp/chrome.err" || fail "chromium --screenshot"
"$py" - "$tmp/board.png" <<'EOF' || fail "the screenshot does not show the curves"
import sys
from PIL import Image
img = Image.open(sys.argv[1]).convert("RGB")
assert img.size == (1400, 2600), img.size
def count(rgb, tol=40):
    return sum(n for n, c in img.getcolors(1 << 24) if sum(abs(a - b) for a, b in zip(c, rgb)) < tol)
blue, red = count((31, 119, 180)), count((214, 39, 40))
print(f"curve pixels: run a {blue}, run b {red}")
assert blue > 1500 and red > 500, (blue, red)
EOF
[[ -n $shot_copy ]] && cp "$tmp/board.png" "$shot_copy"

# Bad and hostile requests: errors, never a file outside the runs, and the server stays up.
code() { curl -s -o "$tmp/body" -w "%{http_code}" --max-time 10 "$@"; }
[[ $(code "$url/nope") == 404 ]] || fail "/nope"
[[ $(code "$url/api/runs/99") == 404 ]] || fail "/api/runs/99"
for path in "/../../etc/passwd" "/%2e%2e/%2e%2e/etc/passwd" "/api/runs/0/../../../etc/passwd" \
  "/board.js/..%2f..%2f..%2fetc%2fpasswd" "/..%5c..%5cetc%5cpasswd"; do
  c=$(code --path-as-is "$url$path")
  [[ $c == 4* ]] || fail "$path answered $c"
  ! grep -q "root:" "$tmp/body" || fail "$path served /etc/passwd"
done
long=$(head -c 100000 /dev/zero | tr '\0' a)
c=$(code "$url/$long")
[[ $c == 414 || $c == 400 ]] || fail "a 100 KB URL answered $c"
[[ $(code -d 'x=1' "$url/api/runs") == 405 ]] || fail "POST /api/runs"
[[ $(code -X DELETE "$url/") == 405 ]] || fail "DELETE /"
printf 'GARBAGE\r\n\r\n' | timeout 5 bash -c "cat >/dev/tcp/127.0.0.1/$port" || true
[[ $(code "$url/api/runs") == 200 ]] || fail "the board stopped answering after bad requests"
[[ $(code "$url/board.js") == 200 ]] && grep -q "lineChart" "$tmp/body" || fail "/board.js"

# Bad run directories and ports; SIGTERM ends the board cleanly.
expect_error "does not exist" board "$tmp/none"
expect_error "is not a directory" board "$tmp/a/history.csv"
out=$(timeout 20 "$kiln" board "$tmp/a" --port "$port" 2>&1) && fail "a second board on port $port started"
grep -qF "cannot listen on 127.0.0.1:$port" <<<"$out" || fail "port in use: $out"
kill -TERM "$board_pid"
timeout 10 tail --pid="$board_pid" -f /dev/null || fail "the board ignored SIGTERM"
wait "$board_pid" || fail "the board exited with an error after SIGTERM"
grep -q "kiln board: stopped" "$tmp/board.log" || fail "no stop message"
# Ctrl-C (SIGINT) as well, on the fixed port the stopped board freed.
"$kiln" board "$tmp/b" --port "$port" >"$tmp/board2.log" 2>&1 &
board_pid=$!
pids+=("$board_pid")
for _ in $(seq 100); do grep -q serving "$tmp/board2.log" && break; sleep 0.1; done
[[ $(code "$url/api/runs") == 200 ]] || fail "board on --port $port: $(cat "$tmp/board2.log")"
kill -INT "$board_pid"
timeout 10 tail --pid="$board_pid" -f /dev/null || fail "the board ignored SIGINT"
wait "$board_pid" || fail "the board exited with an error after SIGINT"
echo "test_board: all checks passed"
