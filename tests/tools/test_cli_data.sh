#!/usr/bin/env bash
# End-to-end checks of `kiln train` on a user's own data (an image folder, a CSV table), of
# `kiln predict`, of the callbacks the command offers (early stopping, best checkpoint, lr on
# plateau, each surviving a resume), of --config and of the files a run keeps up to date
# (steps.csv, validation.json, history.csv with the lr).
# Usage: test_cli_data.sh path/to/kiln
set -euo pipefail
py=/usr/bin/python3

source "$(dirname "$0")/cli_test_lib.sh" "$1"
# json FILE EXPR: prints the Python expression EXPR over the parsed file `j`.
json() { "$py" -c "import json,sys; j=json.load(open(sys.argv[1])); print($2)" "$1"; }

"$kiln" --version | grep -qE '^kiln [0-9]+\.[0-9]+\.[0-9]+$' || fail "kiln --version: $("$kiln" --version)"

# --- the user's own images: Fashion-MNIST classes 0, 1, 7 as PNG files, a folder per class ---
"$py" - "$tmp" <<'EOF'
import gzip, os, sys
import numpy as np
from PIL import Image
root = sys.argv[1]
d = "/usr/share/datasets/fashion-mnist"
img = np.frombuffer(gzip.open(f"{d}/train-images-idx3-ubyte.gz").read(), np.uint8, offset=16).reshape(-1, 28, 28)
lab = np.frombuffer(gzip.open(f"{d}/train-labels-idx1-ubyte.gz").read(), np.uint8, offset=8)
names = {0: "shirt", 1: "trouser", 7: "sneaker"}
counts = {}
for i in range(len(lab)):
    c = int(lab[i])
    if c not in names or counts.get(c, 0) >= 83: continue
    k = counts[c] = counts.get(c, 0) + 1
    split = "test" if k > 60 else "train"
    for layout in ("flat", "split") if k <= 80 else ():
        sub = os.path.join(root, layout, split if layout == "split" else "", names[c])
        os.makedirs(sub, exist_ok=True)
        Image.fromarray(img[i]).save(os.path.join(sub, f"{i}.png"))
    if k > 80:  # 3 unseen ones per class to predict, as RGB JPEG at another size and as .npy
        os.makedirs(os.path.join(root, "new"), exist_ok=True)
        Image.fromarray(img[i]).convert("RGB").resize((56, 56)).save(os.path.join(root, "new", f"{names[c]}_{i}.jpg"))
        np.save(os.path.join(root, "new", f"{names[c]}_{i}.npy"), img[i])
EOF
# A folder per class, 20 % held out (drawn with --seed).
"$kiln" train --data image-folder --data-dir "$tmp/flat" --channels 1 --image-size 28 --epochs 3 \
  --batch-size 20 --out "$tmp/img" >"$tmp/img.log" 2>&1 || fail "image-folder run: $(tail -5 "$tmp/img.log")"
grep -q "Test accuracy: .*48 samples, 20% of $tmp/flat held out" "$tmp/img.log" || fail "held-out split: $(tail -3 "$tmp/img.log")"
acc=$(grep -o "Test accuracy: [0-9.]*" "$tmp/img.log" | grep -o "[0-9.]*$")
awk -v a="$acc" 'BEGIN { exit !(a >= 80) }' || fail "image-folder accuracy $acc% (3 easy classes)"
[[ $(json "$tmp/img/config.json" "j['data_info']['class_names']") == "['shirt', 'sneaker', 'trouser']" ]] ||
  fail "class names: $(cat "$tmp/img/config.json")"
[[ $(json "$tmp/img/config.json" "len(j['data_info']['mean'])") == 1 ]] || fail "one channel's statistics expected"
# The files kept up to date while training.
[[ $(head -1 "$tmp/img/history.csv") == "epoch,accuracy,loss,lr,val_accuracy,val_loss" ]] ||
  fail "history.csv header: $(head -1 "$tmp/img/history.csv")"
[[ $(head -1 "$tmp/img/steps.csv") == "step,epoch,loss,lr,samples_per_second" ]] || fail "steps.csv header"
[[ $(wc -l <"$tmp/img/steps.csv") -eq 31 ]] || fail "steps.csv: 3 epochs x 10 steps expected, got $(wc -l <"$tmp/img/steps.csv") lines"
[[ $(tail -1 "$tmp/img/steps.csv") == 30,3,* ]] || fail "steps.csv last row: $(tail -1 "$tmp/img/steps.csv")"
[[ $(json "$tmp/img/validation.json" "j['epoch'], j['samples'], sum(j['confusion'])") == "3 48 48" ]] ||
  fail "validation.json: $(cat "$tmp/img/validation.json")"
grep -q "lr: 0.001" "$tmp/img.log" || fail "the progress bar shows no lr"
# eval reproduces the held-out split from the record.
"$kiln" eval "$tmp/img" >"$tmp/img_eval.log" 2>&1 || fail "eval: $(tail -3 "$tmp/img_eval.log")"
grep -q "accuracy ${acc}%" "$tmp/img_eval.log" || fail "eval differs from training's test accuracy $acc: $(tail -1 "$tmp/img_eval.log")"

# train/ and test/ folders; RGB and center crops.
"$kiln" train --data image-folder --data-dir "$tmp/split" --image-size 24 --resize crop --model mlp \
  --epochs 1 --out "$tmp/split_run" >"$tmp/split.log" 2>&1 || fail "train/test layout: $(tail -5 "$tmp/split.log")"
grep -q "60 samples, $tmp/split/test)" "$tmp/split.log" || fail "test/ not used: $(tail -2 "$tmp/split.log")"
mkdir -p "$tmp/odd/train/a" "$tmp/odd/train/b" "$tmp/odd/val/a"
cp "$tmp"/flat/shirt/*.png "$tmp/odd/train/a/" && cp "$tmp"/flat/trouser/*.png "$tmp/odd/train/b/"
cp "$tmp"/flat/shirt/*.png "$tmp/odd/val/a/"
expect_error "differ from those of" train --data image-folder --data-dir "$tmp/odd" --out "$tmp/x"
expect_error "not a directory" train --data image-folder --data-dir "$tmp/nothing" --out "$tmp/x"
expect_error "--channels" train --data image-folder --data-dir "$tmp/flat" --channels 2 --out "$tmp/x"
printf 'not an image' >"$tmp/flat/shirt/broken.png"
expect_error "broken.png" train --data image-folder --data-dir "$tmp/flat" --epochs 1 --out "$tmp/x" --overwrite
rm "$tmp/flat/shirt/broken.png"

# --- predict: images of another size and mode, .npy arrays, JSON and CSV output ---
"$kiln" predict "$tmp/img" --input "$tmp/new" --top-k 2 --out "$tmp/pred.json" >"$tmp/pred.log" 2>&1 ||
  fail "predict: $(tail -3 "$tmp/pred.log")"
[[ $(json "$tmp/pred.json" "len(j)") == 18 ]] || fail "9 images + 9 arrays expected: $(head -c 300 "$tmp/pred.json")"
right=$(json "$tmp/pred.json" "sum(p['input'].split('_')[0] == p['top'][0]['class'] for p in j)")
((right >= 14)) || fail "predict: only $right of 18 unseen inputs classified right: $(cat "$tmp/pred.log")"
[[ $(json "$tmp/pred.json" "all(len(p['top']) == 2 and p['top'][0]['probability'] >= p['top'][1]['probability'] for p in j)") == True ]] ||
  fail "top-2 not sorted"
# The JPEG (RGB, 56x56) and the .npy (uint8 28x28) of one image agree.
[[ $(json "$tmp/pred.json" "len({p['input'].rsplit('.', 1)[0]: p['top'][0]['class'] for p in j})") == 9 ]] ||
  fail "predict: an image and its array got different classes"
"$kiln" predict "$tmp/img" --input "$tmp/new" --out "$tmp/pred.csv" >/dev/null 2>&1 || fail "predict --out csv"
# The int8 copy of the run (kiln quantize) predicts as well.
"$kiln" quantize "$tmp/img" --calibration-samples 100 --out "$tmp/img8" >"$tmp/img8.log" 2>&1 ||
  fail "quantize: $(tail -3 "$tmp/img8.log")"
"$kiln" predict "$tmp/img8" --input "$tmp/new" --out "$tmp/pred8.json" >/dev/null 2>&1 ||
  fail "predict with the int8 copy"
right8=$(json "$tmp/pred8.json" "sum(p['input'].split('_')[0] == p['top'][0]['class'] for p in j)")
((right8 >= 14)) || fail "predict (int8): only $right8 of 18 unseen inputs classified right"
[[ $(head -1 "$tmp/pred.csv") == "input,rank,class,index,probability" && $(wc -l <"$tmp/pred.csv") -eq 55 ]] ||
  fail "predictions CSV: $(head -3 "$tmp/pred.csv")"
grep -q "1. \(shirt\|sneaker\|trouser\) [0-9.]*%" "$tmp/pred.log" || fail "printed predictions: $(head -3 "$tmp/pred.log")"
expect_error "neither a file nor a directory" predict "$tmp/img" --input "$tmp/missing.png"
printf 'x' >"$tmp/notes.txt"
expect_error "expected a .png, .jpg, .jpeg, .npy or .csv file" predict "$tmp/img" --input "$tmp/notes.txt"
printf 'garbage' >"$tmp/bad.png"
expect_error "bad.png" predict "$tmp/img" --input "$tmp/bad.png"
"$py" -c "import numpy as np; np.save('$tmp/wrong.npy', np.zeros((2, 2, 5, 5, 5), np.float32))"
expect_error "wrong.npy" predict "$tmp/img" --input "$tmp/wrong.npy"
expect_error "--out to end in .json or .csv" predict "$tmp/img" --input "$tmp/new" --out "$tmp/p.txt"
expect_error "does not exist" predict "$tmp/nowhere" --input "$tmp/new"

# --- a CSV table: 4 features, 3 classes, separable by the sign of two features ---
"$py" - "$tmp/table.csv" "$tmp/rows.csv" <<'EOF'
import sys
import numpy as np
g = np.random.default_rng(5)
for path, n in ((sys.argv[1], 600), (sys.argv[2], 30)):
    x = g.normal(size=(n, 4)) * [1, 3, 0.5, 10] + [0, 5, 0, 100]
    y = (x[:, 0] > 0).astype(int) + (x[:, 2] > 0.25).astype(int)
    with open(path, "w") as f:
        f.write("a,b,c,label,d\n")
        for r, l in zip(x, y):
            f.write(f"{r[0]:.5f},{r[1]:.5f},{r[2]:.5f},{l},{r[3]:.5f}\n")
EOF
"$kiln" train --data csv --data-dir "$tmp/table.csv" --model mlp --epochs 8 --batch-size 32 --lr 0.01 \
  --out "$tmp/tab" >"$tmp/tab.log" 2>&1 || fail "csv run: $(tail -5 "$tmp/tab.log")"
acc=$(grep -o "Test accuracy: [0-9.]*" "$tmp/tab.log" | grep -o "[0-9.]*$")
awk -v a="$acc" 'BEGIN { exit !(a >= 85) }' || fail "csv accuracy $acc%"
[[ $(json "$tmp/tab/config.json" "j['data_info']['kind'], j['data_info']['features']") == "table 4" ]] ||
  fail "table data_info: $(cat "$tmp/tab/config.json")"
"$kiln" predict "$tmp/tab" --input "$tmp/rows.csv" >"$tmp/rows.log" 2>&1 || fail "predict csv: $(tail -3 "$tmp/rows.log")"
grep -q "Accuracy on the 30 labelled rows" "$tmp/rows.log" || fail "predict csv: $(tail -2 "$tmp/rows.log")"
grep -q "^rows.csv:2 " "$tmp/rows.log" || fail "rows named by line: $(head -2 "$tmp/rows.log")"
expect_error "needs images" train --data csv --data-dir "$tmp/table.csv" --model cnn --out "$tmp/x"
expect_error "--augment" train --data csv --data-dir "$tmp/table.csv" --augment --out "$tmp/x"
expect_error "label" train --data csv --data-dir "$tmp/table.csv" --label-column species --out "$tmp/x"
expect_error "not a file" train --data csv --data-dir "$tmp" --out "$tmp/x"
expect_error "is an image" predict "$tmp/tab" --input "$tmp/new/$(ls "$tmp/new" | grep jpg | head -1)"

# --- callbacks: a learning rate too small to change anything makes every epoch a plateau ---
common=(--model mlp --train-samples 600 --batch-size 100 --lr 1e-9 --optimizer sgd)
"$kiln" train "${common[@]}" --epochs 6 --early-stopping 2 --monitor val_accuracy --checkpoint-best val_accuracy \
  --out "$tmp/early" >"$tmp/early.log" 2>&1 || fail "early stopping run: $(tail -5 "$tmp/early.log")"
grep -q "Stopped after epoch 3: EarlyStopping: val_accuracy did not improve for 2 epoch(s)" "$tmp/early.log" ||
  fail "early stopping: $(grep -i stop "$tmp/early.log")"
[[ $(wc -l <"$tmp/early/history.csv") -eq 4 ]] || fail "3 epochs expected in history.csv"
[[ -f $tmp/early/best.safetensors ]] || fail "no best.safetensors"
"$kiln" predict "$tmp/early" --weights "$tmp/early/best.safetensors" --input "$tmp/new" >/dev/null 2>&1 ||
  fail "predict --weights best.safetensors"
"$kiln" train --out "$tmp/early" --resume >"$tmp/early2.log" 2>&1 || fail "resume of a stopped run: $(tail -3 "$tmp/early2.log")"
grep -q "stopped early after epoch 3" "$tmp/early2.log" || fail "resume should say the run stopped: $(head -5 "$tmp/early2.log")"
[[ $(wc -l <"$tmp/early/history.csv") -eq 4 ]] || fail "a stopped run trained on after --resume"

# ReduceLROnPlateau: halved at the end of every flat epoch after the first (history.csv holds
# the lr each epoch trained with); a run resumed midway lowers it as the
# uninterrupted one does (the callback's state is in the checkpoint).
plateau=(--reduce-lr-on-plateau 1 --lr-factor 0.5 --monitor val_accuracy)
"$kiln" train "${common[@]}" "${plateau[@]}" --epochs 4 --out "$tmp/whole" >/dev/null 2>&1 || fail "plateau run"
"$kiln" train "${common[@]}" "${plateau[@]}" --epochs 2 --out "$tmp/part" >/dev/null 2>&1 || fail "plateau part 1"
"$kiln" train --epochs 4 --out "$tmp/part" --resume >"$tmp/part.log" 2>&1 || fail "plateau resume: $(tail -3 "$tmp/part.log")"
lrs() { "$py" -c "import csv,sys; print([float(r['lr']) for r in csv.DictReader(open(sys.argv[1]))])" "$1"; }
[[ $(lrs "$tmp/whole/history.csv") == "[1e-09, 1e-09, 5e-10, 2.5e-10]" ]] || fail "plateau lrs: $(lrs "$tmp/whole/history.csv")"
[[ $(lrs "$tmp/part/history.csv") == "$(lrs "$tmp/whole/history.csv")" ]] || fail "resumed plateau lrs: $(lrs "$tmp/part/history.csv")"
expect_error "cannot be combined with --schedule cosine" train --reduce-lr-on-plateau 2 --schedule cosine --out "$tmp/x"
expect_error "--monitor val_loss, val_accuracy, loss, accuracy" train --monitor val_f1 --early-stopping 2 --out "$tmp/x"

# --- --config: settings from a file; the command line wins; a run's config.json replays it ---
printf '{"epochs": 1, "train_samples": 500, "batch_size": 50, "lr": 0.002, "augment": false}\n' >"$tmp/run.json"
"$kiln" train --config "$tmp/run.json" --lr 0.003 --out "$tmp/cfg" >"$tmp/cfg.log" 2>&1 || fail "--config: $(tail -3 "$tmp/cfg.log")"
[[ $(json "$tmp/cfg/config.json" "j['settings']['lr'], j['settings']['batch_size'], j['settings']['epochs']") == "0.003 50 1" ]] ||
  fail "config.json after --config: $(cat "$tmp/cfg/config.json")"
"$kiln" train --config "$tmp/cfg/config.json" --out "$tmp/replay" >/dev/null 2>&1 || fail "replaying config.json"
cmp "$tmp/cfg/history.csv" "$tmp/replay/history.csv" || fail "a run replayed from its config.json differs"
printf '{"learning_rate": 0.1}' >"$tmp/bad.json"
expect_error 'sets "learning_rate", which is not a setting' train --config "$tmp/bad.json"
printf '{"lr": [1, 2]}' >"$tmp/bad.json"
expect_error 'to be a string, number or boolean' train --config "$tmp/bad.json"
printf '{"lr": ' >"$tmp/bad.json"
expect_error "is not valid JSON" train --config "$tmp/bad.json"
printf '{"lr": -1}' >"$tmp/bad.json"
expect_error "--lr" train --config "$tmp/bad.json"
expect_error "cannot read" train --config "$tmp/none.json"
echo "test_cli_data: all checks passed"
