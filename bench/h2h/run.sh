#!/usr/bin/env bash
# kiln (eager and compiled) vs PyTorch (eager and TorchScript) vs LibTorch vs ONNX Runtime, head
# to head, in one run (see the "Head to head" section of bench/README.md). Installs what it needs,
# builds kiln_h2h and libtorch_h2h in Release, runs every workload group as a separate process per
# framework (2 threads each), and prints the tables; the same goes to a JSON file.
#
#   bench/h2h/run.sh [--quick] [--compare SAVED.json] [--out FILE.json] [--tolerance 0.10]
#                    [--torch-blas openblas|system]
#
#   --quick        few repetitions, and the Fashion-MNIST epoch extrapolated from 50 steps: a
#                  smoke run (minutes) that checks the whole harness end to end
#   --compare F    regression guard: adds a "kiln vs saved" column against an earlier --out file
#                  and exits 3 when a kiln figure got slower by more than --tolerance (see
#                  report.py for the rule)
#   --out F        the JSON report (default: $build/h2h/h2h.json; the table is also kept in
#                  $build/h2h/h2h.txt)
#   --rounds N     run every group N times, alternating the order of the sides (kiln, PyTorch,
#                  ORT, then ORT, PyTorch, kiln, ...), and report each side's median over the
#                  rounds: the machine's speed drifts by tens of percent over minutes (shared
#                  host), and mirrored order cancels a steady drift (default 2; 1 with --quick)
#   --torch-blas   PyTorch's matmuls go to whatever libblas.so.3 the system selects; Debian's
#                  python3-torch recommends OpenBLAS, but setup.sh installs without recommends,
#                  which leaves the reference netlib BLAS (~10x slower). "openblas" (default)
#                  unpacks Debian's libopenblas0-openmp under $build/h2h/openblas and points only
#                  the PyTorch processes at it (nothing on the system changes); "system" leaves
#                  PyTorch as installed.
#
# Environment: KILN_BENCH_GROUPS (default "micro infer compile train trainc cnn lowp": the groups
# to run, e.g. KILN_BENCH_GROUPS=lowp), KILN_BENCH_THREADS (default 2), KILN_BENCH_BUILD_DIR
# (default build/bench),
# KILN_BENCH_JOBS (ninja -j), KILN_BENCH_SKIP_BUILD=1 (use the existing kiln_h2h as is).
set -euo pipefail

quick=0
compare=""
out=""
tolerance=0.10
torch_blas=openblas
rounds=""
while (($#)); do
  case "$1" in
    --quick) quick=1 ;;
    --compare) compare="$(realpath -e "${2:?--compare needs a file}")"; shift ;;
    --out) out="$(realpath -m "${2:?--out needs a file}")"; shift ;;
    --tolerance) tolerance="${2:?--tolerance needs a fraction}"; shift ;;
    --rounds) rounds="${2:?--rounds needs a count}"; shift ;;
    --torch-blas) torch_blas="${2:?--torch-blas needs openblas or system}"; shift ;;
    -h|--help) sed -n '2,29p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "run.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done
[[ "$torch_blas" == openblas || "$torch_blas" == system ]] ||
  { echo "run.sh: --torch-blas must be openblas or system" >&2; exit 2; }

rounds="${rounds:-$( ((quick)) && echo 1 || echo 2)}"
[[ "$rounds" =~ ^[1-9][0-9]*$ ]] || { echo "run.sh: --rounds must be a positive count" >&2; exit 2; }

cd "$(dirname "${BASH_SOURCE[0]}")/../.."
threads="${KILN_BENCH_THREADS:-2}"
build="${KILN_BENCH_BUILD_DIR:-build/bench}"
work="$build/h2h"
out="${out:-$(realpath -m "$work/h2h.json")}"
python=/usr/bin/python3  # Debian's interpreter: the one that has python3-torch and python3-onnx
log() { echo "h2h: $*" >&2; }
load() { cut -d' ' -f1-3 /proc/loadavg; }

# --- what the harness needs, installed only when missing -------------------------------------
bash scripts/setup.sh
missing=()
dpkg-query -W -f='${Status}' python3-onnx 2>/dev/null | grep -q "install ok installed" ||
  missing+=(python3-onnx)
dpkg-query -W -f='${Status}' libtorch-dev 2>/dev/null | grep -q "install ok installed" ||
  missing+=(libtorch-dev)
command -v node >/dev/null || missing+=(nodejs)
command -v npm >/dev/null || missing+=(npm)
if ((${#missing[@]})); then
  log "installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
if [[ ! -f bench/h2h/node_modules/onnxruntime-node/package.json ]]; then
  log "npm install --ignore-scripts onnxruntime-node (into bench/h2h/node_modules)"
  (cd bench/h2h && npm install --ignore-scripts --no-audit --no-fund --no-package-lock \
    --loglevel=error >&2)
fi
mkdir -p "$work"
torch_env=(env)
if [[ "$torch_blas" == openblas ]]; then
  blas_lib="$(find "$work/openblas" -name libblas.so.3 2>/dev/null | head -n 1 || true)"
  if [[ -z "$blas_lib" ]]; then
    log "unpacking Debian's libopenblas0-openmp into $work/openblas (for PyTorch only)"
    rm -rf "$work/openblas" && mkdir -p "$work/openblas"
    (cd "$work/openblas" && { apt-get download -q libopenblas0-openmp >&2 2>/dev/null ||
      { apt-get update -qq && apt-get download -q libopenblas0-openmp >&2; }; })
    dpkg -x "$work"/openblas/libopenblas0-openmp_*.deb "$work/openblas"
    blas_lib="$(find "$work/openblas" -name libblas.so.3 | head -n 1)"
  fi
  torch_env=(env "LD_LIBRARY_PATH=$(dirname "$blas_lib")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}")
fi

# --- build ---------------------------------------------------------------------------------------
if [[ "${KILN_BENCH_SKIP_BUILD:-0}" != 1 ]]; then
  # Warnings are not errors here: a Release-only compiler warning must not stop a measurement.
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DKILN_BUILD_BENCH=ON \
    -DKILN_WERROR=OFF >/dev/null
  log "building kiln_h2h in $build..."
  if ! ninja -C "$build" ${KILN_BENCH_JOBS:+-j "$KILN_BENCH_JOBS"} kiln_h2h \
    >"$build/build_h2h.log" 2>&1; then
    tail -n 40 "$build/build_h2h.log" >&2
    log "build failed (full log: $build/build_h2h.log)"
    exit 1
  fi
  # LibTorch's side, a project of its own (kiln's build never needs LibTorch).
  cmake -S bench/h2h/libtorch -B "$build/libtorch" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
  log "building libtorch_h2h in $build/libtorch..."
  if ! ninja -C "$build/libtorch" ${KILN_BENCH_JOBS:+-j "$KILN_BENCH_JOBS"} \
    >"$build/build_libtorch_h2h.log" 2>&1; then
    tail -n 40 "$build/build_libtorch_h2h.log" >&2
    log "build failed (full log: $build/build_libtorch_h2h.log)"
    exit 1
  fi
fi

# --- run -----------------------------------------------------------------------------------------
export OMP_NUM_THREADS="$threads"
flag=()
((quick)) && flag=(--quick)
rm -f "$work"/{kiln,torch,ort,libtorch}_*.json "$work"/{kiln,torch,ort,libtorch}_*.log \
  "$work/prepare.json"
failures=()
# run_side NAME COMMAND...: stdout (one JSON object) to $work/NAME.json, stderr to NAME.log.
run_side() {
  local name="$1"
  shift
  log "$name (load $(load))..."
  local start=$SECONDS
  if "$@" >"$work/$name.json" 2>"$work/$name.log"; then
    log "$name: $((SECONDS - start)) s"
  else
    log "$name FAILED (exit $?, $work/$name.log):"
    tail -n 5 "$work/$name.log" >&2
    rm -f "$work/$name.json"
    failures+=("$name")
  fi
}

load_start="$(load)"
start_all=$SECONDS
run_side prepare "${torch_env[@]}" "$python" bench/h2h/torch_h2h.py prepare --dir "$work" \
  --threads "$threads"
# run_group SIDE GROUP NAME: one side's process for one workload group.
run_group() {
  case "$1" in
    kiln) run_side "$3" "$build/bench/kiln_h2h" --group="$2" --threads="$threads" --dir="$work" \
      "${flag[@]}" ;;
    torch) run_side "$3" "${torch_env[@]}" "$python" bench/h2h/torch_h2h.py bench --group "$2" \
      --threads "$threads" --dir "$work" "${flag[@]}" ;;
    ort) run_side "$3" node bench/h2h/ort_h2h.js --group "$2" --dir "$work" --threads "$threads" \
      "${flag[@]}" ;;
    libtorch) run_side "$3" "${torch_env[@]}" "$build/libtorch/libtorch_h2h" --group="$2" \
      --threads="$threads" "${flag[@]}" ;;
  esac
}
# Groups alternate between the sides so that both see similar machine load; with several rounds
# the order mirrors every other round (kiln torch ort, ort torch kiln, ...).
# trainc is kiln's compiled training step in a process of its own (its peak RSS); compile is the
# compile-time-by-batch-size table.
for group in ${KILN_BENCH_GROUPS:-micro infer compile train trainc cnn lowp}; do
  if [[ ("$group" == infer || "$group" == compile) && ! -f "$work/prepare.json" ]]; then
    log "skipping $group: torch_h2h.py prepare failed"
    continue
  fi
  case "$group" in
    micro | train) sides=(kiln torch libtorch) ;;
    infer) sides=(kiln torch ort libtorch) ;;
    compile) sides=(kiln torch ort) ;;
    trainc) sides=(kiln) ;;
    cnn | lowp) sides=(kiln torch) ;;
  esac
  for ((r = 1; r <= rounds; r++)); do
    order=("${sides[@]}")
    ((r % 2 == 0)) && order=($(printf '%s\n' "${sides[@]}" | tac))
    suffix=""
    ((r > 1)) && suffix=".r$r"
    for side in "${order[@]}"; do run_group "$side" "$group" "${side}_${group}${suffix}"; done
  done
done
log "all workloads: $((SECONDS - start_all)) s"

kiln_rev="$(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
git diff --quiet HEAD 2>/dev/null || kiln_rev="$kiln_rev+local changes"
set +e
"$python" bench/h2h/report.py --dir "$work" --out "$out" --tolerance "$tolerance" \
  ${compare:+--compare "$compare"} \
  --meta mode="$( ((quick)) && echo quick || echo full)" --meta threads="$threads" \
  --meta cpu="$(grep -m 1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')" \
  --meta cpus="$(nproc)" --meta load_start="$load_start" --meta load_end="$(load)" \
  --meta kiln="$kiln_rev" --meta date="$(date -u +%Y-%m-%dT%H:%M:%SZ)" \
  --meta torch_blas_choice="$torch_blas" --meta rounds="$rounds" --meta seconds="$((SECONDS - start_all))" |
  tee "$work/h2h.txt"
rc=${PIPESTATUS[0]}
set -e
if ((${#failures[@]})); then
  log "failed: ${failures[*]} (logs in $work)"
  ((rc == 0)) && rc=1
fi
exit "$rc"
