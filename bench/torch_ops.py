#!/usr/bin/python3
"""The workloads of bench/bench_ops.cpp in eager PyTorch, with the same names.

Run with Debian's interpreter (/usr/bin/python3, which has python3-torch). Prints one JSON object
{name: seconds_per_iteration} on stdout: each value is the median of 5 timed runs, each run
repeating the workload enough times (found by calibration) to last at least --min-time seconds.

  /usr/bin/python3 bench/torch_ops.py [--threads N] [--min-time S] [--filter REGEX]

Threads: --threads, else KILN_BENCH_THREADS, else 2 (the default of compare_torch.sh).
"""
import argparse
import json
import os
import re
import statistics
import sys
import time

import torch
import torch.nn.functional as F

LARGE = 4 << 20  # 4M float32 elements, as kLarge in bench_ops.cpp


def uniform(*shape, requires_grad=False):
    t = torch.rand(*shape) * 2 - 1
    return t.requires_grad_(requires_grad)


def add_scalar_no_grad():
    a, b = uniform(1), uniform(1)
    return lambda: torch.add(a, b)


def add_scalar_with_grad():
    a, b = uniform(1, requires_grad=True), uniform(1)
    return lambda: torch.add(a, b)


def tiny_forward_backward():
    x = uniform(4)
    w, b = uniform(4, requires_grad=True), uniform(4, requires_grad=True)

    def step():
        y = torch.sum(torch.tanh(x * w + b))
        y.backward()
        w.grad = None
        b.grad = None

    return step


def binary_large(fn):
    def make():
        a, b = uniform(LARGE), uniform(LARGE)
        return lambda: fn(a, b)

    return make


def unary_large(fn):
    def make():
        a = uniform(LARGE)
        return lambda: fn(a)

    return make


def softmax_rows():
    a = uniform(4096, 1024)
    return lambda: torch.softmax(a, 1)


def matmul(n):
    def make():
        a, b = uniform(n, n), uniform(n, n)
        return lambda: torch.matmul(a, b)

    return make


def mlp_step():
    batch, inp, hidden, classes, lr = 64, 784, 256, 10, 0.01
    x = uniform(batch, inp)
    labels = torch.randint(0, classes, (batch, 1))
    w1 = (uniform(inp, hidden) * 0.05).requires_grad_()
    b1 = torch.zeros(hidden, requires_grad=True)
    w2 = (uniform(hidden, classes) * 0.05).requires_grad_()
    b2 = torch.zeros(classes, requires_grad=True)
    params = [w1, b1, w2, b2]

    def step():
        h = torch.relu(torch.add(torch.matmul(x, w1), b1))
        logits = torch.add(torch.matmul(h, w2), b2)
        loss = -torch.mean(torch.gather(F.log_softmax(logits, 1), 1, labels))
        loss.backward()
        with torch.no_grad():
            for p in params:
                p.sub_(p.grad * lr)
                p.grad = None

    return step


WORKLOADS = {
    "BM_AddScalarNoGrad": add_scalar_no_grad,
    "BM_AddScalarWithGrad": add_scalar_with_grad,
    "BM_TinyForwardBackward": tiny_forward_backward,
    "BM_AddLarge": binary_large(torch.add),
    "BM_MulLarge": binary_large(torch.mul),
    "BM_ExpLarge": unary_large(torch.exp),
    "BM_TanhLarge": unary_large(torch.tanh),
    "BM_SigmoidLarge": unary_large(torch.sigmoid),
    "BM_GeluLarge": unary_large(torch.nn.functional.gelu),
    "BM_SoftmaxRows": softmax_rows,
    "BM_SumLarge": unary_large(torch.sum),
    "BM_Matmul/256": matmul(256),
    "BM_Matmul/512": matmul(512),
    "BM_Matmul/1024": matmul(1024),
    "BM_MlpStep": mlp_step,
}


def run_for(fn, iters):
    start = time.perf_counter()
    for _ in range(iters):
        fn()
    return time.perf_counter() - start


def time_workload(fn, min_time, repetitions=5):
    """Median seconds per iteration over `repetitions` runs of a calibrated iteration count."""
    fn()  # warm-up: first-call allocations, oneDNN/BLAS kernel selection
    iters = 1
    while True:
        elapsed = run_for(fn, iters)
        if elapsed >= min_time:
            break
        # Aim 40% past the target so the next try usually suffices, at most 10x per step.
        iters = max(iters + 1, int(iters * min(10.0, 1.4 * min_time / max(elapsed, 1e-9))))
    return statistics.median(run_for(fn, iters) / iters for _ in range(repetitions))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", type=int,
                        default=int(os.environ.get("KILN_BENCH_THREADS") or 2))
    parser.add_argument("--min-time", type=float, default=0.5,
                        help="seconds each timed run lasts at least (Google Benchmark's default)")
    parser.add_argument("--filter", default="", help="regex over workload names")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    results = {}
    for name, make in WORKLOADS.items():
        if args.filter and not re.search(args.filter, name):
            continue
        results[name] = time_workload(make(), args.min_time)
        print(f"torch_ops: {name} {results[name]:.3e} s", file=sys.stderr)
    json.dump(results, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
