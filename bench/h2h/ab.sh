#!/usr/bin/env bash
# kiln against kiln: two builds of kiln_h2h (say, before and after a change) run the same
# workload groups in interleaved, mirrored rounds (A B, B A, A B, ...), so that a machine whose
# speed drifts over minutes (a shared VM) slows both sides alike; prints each workload's median
# over the rounds for A and B and the change B/A - 1. Only kiln runs: this answers "did my
# change make kiln slower", not how kiln compares with PyTorch (bench/h2h/run.sh does that).
#
#   bench/h2h/ab.sh A/kiln_h2h B/kiln_h2h [--rounds 3] [--groups "micro train infer cnn"]
#                   [--work DIR] [--out FILE.json]
#
# The infer group needs torch_h2h.py's prepared weights; they are made once in --work (default
# build/ab) with Debian's python3-torch. Build each side with, for example:
#   git worktree add /tmp/before REV && cmake -S /tmp/before -B /tmp/before/build -G Ninja \
#     -DCMAKE_BUILD_TYPE=Release -DKILN_BUILD_BENCH=ON && ninja -C /tmp/before/build kiln_h2h
# Environment: KILN_BENCH_THREADS (default 2).
set -euo pipefail

usage() { sed -n '2,16p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit "${1:-0}"; }
(($# >= 2)) || usage 2
a="$(realpath -e "$1")"
b="$(realpath -e "$2")"
shift 2
rounds=3
groups="micro train infer cnn"
work=build/ab
out=""
while (($#)); do
  case "$1" in
    --rounds) rounds="${2:?--rounds needs a count}"; shift ;;
    --groups) groups="${2:?--groups needs a list}"; shift ;;
    --work) work="${2:?--work needs a directory}"; shift ;;
    --out) out="${2:?--out needs a file}"; shift ;;
    -h|--help) usage 0 ;;
    *) echo "ab.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done
[[ "$rounds" =~ ^[1-9][0-9]*$ ]] || { echo "ab.sh: --rounds must be a positive count" >&2; exit 2; }
for g in $groups; do
  [[ "$g" =~ ^(micro|train|infer|cnn)$ ]] || { echo "ab.sh: unknown group '$g'" >&2; exit 2; }
done

cd "$(dirname "${BASH_SOURCE[0]}")/../.."
threads="${KILN_BENCH_THREADS:-2}"
export OMP_NUM_THREADS="$threads"
mkdir -p "$work"
work="$(realpath "$work")"
out="${out:-$work/ab.json}"
log() { echo "ab: $*" >&2; }

if [[ " $groups " == *" infer "* && ! -f "$work/prepare.json" ]]; then
  # prepare validates its ONNX export with python3-onnx, as in run.sh.
  if ! dpkg-query -W -f='${Status}' python3-onnx 2>/dev/null | grep -q "install ok installed"; then
    log "installing python3-onnx"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends python3-onnx \
      >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y \
      -qq --no-install-recommends python3-onnx >/dev/null; }
  fi
  log "preparing the infer group's weights (torch_h2h.py prepare)"
  /usr/bin/python3 bench/h2h/torch_h2h.py prepare --dir "$work" --threads "$threads" \
    >"$work/prepare.json.part"
  mv "$work/prepare.json.part" "$work/prepare.json"
fi

rm -f "$work"/[AB]_*.json
start=$SECONDS
for g in $groups; do
  for ((r = 1; r <= rounds; r++)); do
    order=(A B)
    ((r % 2 == 0)) && order=(B A)
    for side in "${order[@]}"; do
      bin="$a"
      [[ "$side" == B ]] && bin="$b"
      log "$g round $r: $side (load $(cut -d' ' -f1-3 /proc/loadavg))"
      "$bin" --group="$g" --threads="$threads" --dir="$work" >"$work/${side}_${g}.r$r.json"
    done
  done
done
log "all rounds: $((SECONDS - start)) s"

/usr/bin/python3 - "$work" "$out" "$a" "$b" "$rounds" <<'PY'
import glob, json, os, statistics, sys
work, out, a, b, rounds = sys.argv[1:]
runs = {"A": {}, "B": {}}
for path in sorted(glob.glob(os.path.join(work, "[AB]_*.r*.json"))):
    side = os.path.basename(path)[0]
    with open(path) as f:
        for name, t in json.load(f).get("results", {}).items():
            if isinstance(t, dict) and "median_s" in t:
                runs[side].setdefault(name, []).append(t["median_s"])
rows = []
print(f"A = {a}\nB = {b}\nrounds = {rounds}; each cell: median over rounds of each round's "
      "median per call (min over rounds in parentheses)\n")
print(f"{'workload':<22} {'A':>20} {'B':>20} {'B/A - 1':>9}")
for name in sorted(set(runs["A"]) & set(runs["B"])):
    ma, mb = statistics.median(runs["A"][name]), statistics.median(runs["B"][name])
    scale, unit = (1e6, "us") if ma < 1e-3 else (1e3, "ms")
    cell = lambda v, m: f"{m * scale:.3f} ({min(v) * scale:.3f}) {unit}"
    print(f"{name:<22} {cell(runs['A'][name], ma):>20} {cell(runs['B'][name], mb):>20} "
          f"{mb / ma - 1:>+9.1%}")
    rows.append({"workload": name, "a_rounds_s": runs["A"][name], "b_rounds_s": runs["B"][name],
                 "a_median_s": ma, "b_median_s": mb, "change": mb / ma - 1})
with open(out, "w") as f:
    json.dump({"a": a, "b": b, "rounds": int(rounds), "rows": rows}, f, indent=1)
print(f"\n(JSON: {out})")
PY
