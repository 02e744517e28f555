#!/usr/bin/env bash
# kiln's DataLoader vs PyTorch's on Fashion-MNIST with crop + flip augmentation, in one run: builds
# kiln_bench_loader in Release, then for each worker count runs it and bench/torch_loader.py
# (median of the epochs each), and prints samples/s and the ratio (target: kiln >= 2x).
#
#   bench/compare_loader.sh
#
# Environment:
#   KILN_LOADER_WORKERS   worker counts to compare (default "0 2")
#   KILN_LOADER_EPOCHS    timed epochs per run, the median is reported (default 3)
#   KILN_BENCH_BUILD_DIR  CMake build directory (default build/bench)
#   KILN_BENCH_JOBS       ninja -j for the build (default: ninja's own)
#   KILN_BENCH_SKIP_BUILD set to 1 to use an existing binary as is
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

workers_list="${KILN_LOADER_WORKERS:-0 2}"
epochs="${KILN_LOADER_EPOCHS:-3}"
build="${KILN_BENCH_BUILD_DIR:-build/bench}"
python=/usr/bin/python3  # Debian's interpreter: the one that has python3-torch

if [[ "${KILN_BENCH_SKIP_BUILD:-0}" != 1 ]]; then
  bash scripts/setup.sh
  # Warnings are not errors here: a Release-only compiler warning must not stop a measurement.
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DKILN_BUILD_BENCH=ON \
    -DKILN_WERROR=OFF >/dev/null
  echo "compare_loader: building kiln_bench_loader in $build..." >&2
  if ! ninja -C "$build" ${KILN_BENCH_JOBS:+-j "$KILN_BENCH_JOBS"} kiln_bench_loader \
    >"$build/build_loader.log" 2>&1; then
    tail -n 40 "$build/build_loader.log" >&2
    echo "compare_loader: build failed (full log: $build/build_loader.log)" >&2
    exit 1
  fi
fi

results=()
for w in $workers_list; do
  echo "compare_loader: kiln, $w workers ($(cut -d' ' -f1-3 /proc/loadavg))..." >&2
  "$build/bench/kiln_bench_loader" --workers="$w" --epochs="$epochs" >"$build/loader_kiln_w$w.json"
  echo "compare_loader: PyTorch, $w workers ($(cut -d' ' -f1-3 /proc/loadavg))..." >&2
  "$python" bench/torch_loader.py --workers "$w" --epochs "$epochs" \
    >"$build/loader_torch_w$w.json"
  results+=("$build/loader_kiln_w$w.json" "$build/loader_torch_w$w.json")
done

"$python" - "$(nproc)" "$epochs" "${results[@]}" <<'EOF'
import json
import sys

cpus, epochs, paths = sys.argv[1], sys.argv[2], sys.argv[3:]
print(f"kiln DataLoader vs PyTorch DataLoader: Fashion-MNIST train (60000), uint8 -> float, "
      f"RandomCrop(28, padding=4), RandomHorizontalFlip, Normalize, batch 128, shuffled; "
      f"median of {epochs} epochs; {cpus} CPUs")
rows = [("workers", "kiln samples/s", "PyTorch samples/s", "ratio", "kiln CPU s/epoch",
         "PyTorch CPU s/epoch", "CPU ratio", "load avg (kiln / PyTorch)")]
ratios = []
for k_path, t_path in zip(paths[::2], paths[1::2]):
    k, t = json.load(open(k_path)), json.load(open(t_path))
    ratio = k["samples_per_second"] / t["samples_per_second"]
    cpu_ratio = t["median_epoch_cpu_seconds"] / k["median_epoch_cpu_seconds"]
    ratios.append((k["workers"], ratio))
    rows.append((str(k["workers"]), f"{k['samples_per_second']:.0f}",
                 f"{t['samples_per_second']:.0f}", f"{ratio:.2f}x",
                 f"{k['median_epoch_cpu_seconds']:.2f}", f"{t['median_epoch_cpu_seconds']:.2f}",
                 f"{cpu_ratio:.2f}x", f"{k['loadavg_before']} / {t['loadavg_before']}"))
widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
for i, r in enumerate(rows):
    print(" | ".join(c.rjust(w) for c, w in zip(r, widths)))
    if i == 0:
        print("-+-".join("-" * w for w in widths))
print("ratio = kiln samples/s / PyTorch samples/s (wall clock); CPU ratio = PyTorch CPU time / "
      "kiln CPU time per epoch (all threads and worker processes; less sensitive to other load)")
for w, r in ratios:
    print(f"target kiln >= 2x PyTorch with {w} workers: {'met' if r >= 2 else 'MISSED'} ({r:.2f}x)")
EOF
