#!/usr/bin/env bash
# kiln vs PyTorch (eager) on the same micro-workloads, in one run: builds kiln_bench in Release,
# runs it (median of 5 repetitions), runs bench/torch_ops.py (median of 5 runs), prints one table.
#
#   bench/compare_torch.sh
#
# Environment:
#   KILN_BENCH_THREADS    threads for both sides (default 2)
#   KILN_BENCH_BUILD_DIR  CMake build directory (default build/bench)
#   KILN_BENCH_FILTER     regex over workload names, for a quick partial run (default: all)
#   KILN_BENCH_JOBS       ninja -j for the build (default: ninja's own)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

threads="${KILN_BENCH_THREADS:-2}"
build="${KILN_BENCH_BUILD_DIR:-build/bench}"
filter="${KILN_BENCH_FILTER:-}"
python=/usr/bin/python3  # Debian's interpreter: the one that has python3-torch

bash scripts/setup.sh

# Warnings are not errors here: a Release-only compiler warning must not stop a measurement.
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DKILN_BUILD_BENCH=ON -DKILN_WERROR=OFF \
  >/dev/null
echo "compare_torch: building kiln_bench in $build..." >&2
if ! ninja -C "$build" ${KILN_BENCH_JOBS:+-j "$KILN_BENCH_JOBS"} kiln_bench >"$build/build.log" 2>&1
then
  tail -n 40 "$build/build.log" >&2
  echo "compare_torch: build failed (full log: $build/build.log)" >&2
  exit 1
fi

load_before="$(cut -d' ' -f1-3 /proc/loadavg)"
echo "compare_torch: running kiln_bench ($threads threads)..." >&2
KILN_BENCH_THREADS="$threads" "$build/bench/kiln_bench" \
  ${filter:+--benchmark_filter="$filter"} \
  --benchmark_format=json --benchmark_repetitions=5 --benchmark_report_aggregates_only=true \
  >"$build/kiln_bench.json"
echo "compare_torch: running bench/torch_ops.py ($threads threads)..." >&2
"$python" bench/torch_ops.py --threads "$threads" ${filter:+--filter "$filter"} \
  >"$build/torch_ops.json" 2>"$build/torch_ops.log" || { cat "$build/torch_ops.log" >&2; exit 1; }
load_after="$(cut -d' ' -f1-3 /proc/loadavg)"
blas="$(readlink -f /usr/lib/x86_64-linux-gnu/libblas.so.3 2>/dev/null || echo unknown)"

"$python" - "$build/kiln_bench.json" "$build/torch_ops.json" "$threads" "$load_before" \
  "$load_after" "$blas" <<'EOF'
import json
import re
import sys

kiln_path, torch_path, threads, load_before, load_after, blas = sys.argv[1:]
UNIT = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}

kiln, context = {}, {}
with open(kiln_path) as f:
    report = json.load(f)
context = report.get("context", {})
for b in report["benchmarks"]:
    if b.get("run_type") == "aggregate" and b.get("aggregate_name") != "median":
        continue
    name = re.sub(r"/real_time$", "", b["run_name"])
    kiln[name] = b["real_time"] * UNIT[b["time_unit"]]
with open(torch_path) as f:
    torch = json.load(f)


def fmt_time(s):
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if s >= scale:
            return f"{s / scale:.3g} {unit}"
    return f"{s / 1e-9:.3g} ns"


def gflops(n, seconds):
    return 2.0 * n ** 3 / seconds / 1e9 if seconds else float("nan")


print(f"kiln vs PyTorch 1.13 eager: {threads} threads, medians of 5 repetitions, wall-clock time "
      f"per iteration")
print(f"load average before/after: {load_before} / {load_after} on "
      f"{context.get('num_cpus', '?')} CPUs (other work on the machine inflates both sides)")
print("speedup = PyTorch time / kiln time (> 1: kiln faster)\n")
rows = [("workload", "kiln", "PyTorch", "speedup")]
for name, t in kiln.items():
    if name.startswith("BM_DnnlSgemm"):
        continue
    p = torch.get(name)
    rows.append((name, fmt_time(t), fmt_time(p) if p else "-", f"{p / t:.2f}x" if p else "-"))
widths = [max(len(r[i]) for r in rows) for i in range(4)]
for i, r in enumerate(rows):
    print(" | ".join(c.ljust(w) if j == 0 else c.rjust(w) for j, (c, w) in enumerate(zip(r, widths))))
    if i == 0:
        print("-+-".join("-" * w for w in widths))

sizes = sorted({int(m.group(1)) for k in kiln if (m := re.match(r"BM_Matmul/(\d+)$", k))})
if sizes:
    print("\nmatmul GFLOP/s (2n^3 flops / time)")
    rows = [("n", "kiln", "oneDNN sgemm", "PyTorch", "kiln/oneDNN")]
    for n in sizes:
        k, d, p = kiln.get(f"BM_Matmul/{n}"), kiln.get(f"BM_DnnlSgemm/{n}"), torch.get(f"BM_Matmul/{n}")
        rows.append((str(n), f"{gflops(n, k):.1f}", f"{gflops(n, d):.1f}" if d else "-",
                     f"{gflops(n, p):.1f}" if p else "-", f"{d / k:.2f}" if d else "-"))
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    for i, r in enumerate(rows):
        print(" | ".join(c.rjust(w) for c, w in zip(r, widths)))
        if i == 0:
            print("-+-".join("-" * w for w in widths))
    if "blas/libblas.so" in blas:
        print(f"note: PyTorch's matmul goes to {blas}, Debian's reference (netlib) BLAS;\n"
              f"      installing libopenblas0 makes it OpenBLAS and the PyTorch column meaningful.")

print("\ntargets")
if "BM_AddScalarNoGrad" in kiln:
    t = kiln["BM_AddScalarNoGrad"]
    print(f"  per-op eager overhead (1-element add, no grad): {t * 1e6:.3f} us, target <= 0.5 us: "
          f"{'met' if t <= 0.5e-6 else 'MISSED'}")
for n in sizes:
    k, d = kiln.get(f"BM_Matmul/{n}"), kiln.get(f"BM_DnnlSgemm/{n}")
    if d:
        r = d / k
        print(f"  matmul {n}: kiln at {r:.2f} of oneDNN sgemm, target >= 0.90: "
              f"{'met' if r >= 0.9 else 'MISSED'}")
EOF
