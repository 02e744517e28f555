#!/usr/bin/python3
"""kiln's differential fuzzer against PyTorch.

Usage:
  /usr/bin/python3 tests/fuzz/fuzz.py --worker build/release/tests/fuzz/kiln_fuzz_worker
        [--seeds 1-300 | --campaign N [--start S]] [--out DIR] [--threads 1,2] [--no-shrink]
        [--max-seconds T] [--verbose]
  /usr/bin/python3 tests/fuzz/fuzz.py --worker W --replay PROGRAM.json

For every seed it generates a program from the op registry (fuzz_gen.py), runs it in kiln at 1
and 2 threads (kiln_fuzz_worker) and in PyTorch (fuzz_torch.py), and compares every value, every
gradient and the step at which each side rejected the program. A float32 mismatch is re-run in
float64; if float64 agrees it counts as float32 rounding, not a failure. Results that differ
between thread counts are failures unless every differing value comes from an op the registry
declares thread-variant. Each failure is shrunk (fuzz_shrink.py) and written to DIR with a kiln
C++ and a PyTorch repro; a triage table groups failures by kind and op. Differences kept on
purpose are listed in known_differences.json with where users can read about them.
Exit status: 0 when nothing but known differences failed.
"""

import argparse
import json
import os
import selectors
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import fuzz_gen  # noqa: E402
import fuzz_shrink  # noqa: E402

FAILURE_KINDS = ("torch-crash", "mismatch", "grad-mismatch", "kiln-rejects", "torch-rejects", "internal",
                 "untranslated", "outputs", "crash", "hang", "harness", "threads")


class Worker:
    """kiln_fuzz_worker serve, restarted after a crash or a hang."""

    def __init__(self, path, timeout=60.0):
        self.path, self.timeout, self.proc = path, timeout, None

    def start(self):
        # stderr goes to a temporary file: a pipe nobody reads could fill and block the worker.
        self.stderr = tempfile.TemporaryFile("w+")
        self.proc = subprocess.Popen([self.path, "serve"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self.stderr, text=True,
                                     bufsize=1)
        self.sel = selectors.DefaultSelector()
        self.sel.register(self.proc.stdout, selectors.EVENT_READ)

    def stop(self):
        if self.proc:
            self.proc.kill()
            self.proc.wait()
            self.proc = None

    def run(self, program, threads):
        if self.proc is None:
            self.start()
        try:
            self.proc.stdin.write(json.dumps({"program": program, "threads": threads}) + "\n")
            self.proc.stdin.flush()
        except BrokenPipeError:
            pass
        if not self.sel.select(self.timeout):
            self.stop()
            return {"hang": f"no answer in {self.timeout:.0f} s"}
        line = self.proc.stdout.readline()
        if not line:
            code = self.proc.wait()
            self.stderr.seek(0)
            err = self.stderr.read()[-2000:]
            self.proc = None
            return {"crash": f"worker exited with status {code}: {err.strip()}"}
        return json.loads(line)


class TorchSide:
    """fuzz_torch.py's server in a child process, restarted when PyTorch crashes."""

    def __init__(self, catalog_path):
        self.catalog_path, self.proc = catalog_path, None
        self.stderr_path = catalog_path + ".torch_stderr"

    def compare(self, program, kres):
        if self.proc is None:
            # stderr goes to a file: a pipe nobody reads could fill and block the child.
            self.stderr = open(self.stderr_path, "w+")
            self.proc = subprocess.Popen(
                [sys.executable, os.path.join(HERE, "fuzz_torch.py"), self.catalog_path],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr, text=True,
                bufsize=1)
        try:
            self.proc.stdin.write(json.dumps({"program": program, "kres": kres}) + "\n")
            self.proc.stdin.flush()
            line = self.proc.stdout.readline()
        except BrokenPipeError:
            line = ""
        if not line:
            self.proc.wait()
            self.stderr.seek(0)
            err = self.stderr.read()[-300:].strip()
            self.proc = None
            return "torch-crash", f"PyTorch crashed: {err}", None
        r = json.loads(line)
        return r["kind"], r["detail"], tuple(r["where"]) if r["where"] else None


class Fuzzer:
    def __init__(self, torch_side, worker, catalog, threads, known):
        self.torch_side, self.worker, self.threads = torch_side, worker, threads
        self.catalog = catalog
        self.by_id = {s["id"]: s for s in catalog}
        self.known = known

    def op_of(self, program, where):
        """The op (sample id's op, or in-place method) at a step or that produced a value."""
        if where is None:
            return "-"
        kind, idx = where
        steps = program["steps"]
        if kind == "step":
            if idx >= len(steps):
                return "loss/backward"
            s = steps[idx]
            return s["inplace"] if "inplace" in s else s["call"].split("/")[0]
        n = len(program["inputs"])
        if idx < n:
            # A leaf's gradient: name the first op that reads it.
            for s in steps:
                if idx in s.get("args", []) or idx in (s.get("target"), s.get("other")):
                    return s["call"].split("/")[0] if "call" in s else s["inplace"]
            return "input"
        for s in steps:
            if "call" in s:
                n += len(self.by_id[s["call"]]["outputs"])
                if idx < n:
                    return s["call"].split("/")[0]
        return "?"

    def check(self, program, threads=None):
        """(kind, detail, op, kiln result)."""
        kres = self.worker.run(program, threads or self.threads)
        for kind in ("crash", "hang", "harness_error"):
            if kind in kres:
                return ("harness" if kind == "harness_error" else kind), kres[kind], "-", kres
        kind, detail, where = self.torch_side.compare(program, kres)
        if kind in ("pass", "both-reject") and kres.get("thread_diff"):
            diffs = kres["thread_diff"]
            declared = [s["call"] for s in program["steps"]
                        if "call" in s and self.by_id[s["call"]]["thread_variance"]]
            if declared:
                return "threads-declared", f"{diffs} ({declared[0]})", "-", kres
            first = next(iter(diffs.values()))[0]
            where = ("value", int(first.split()[-1])) if first != "error" else None
            detail = json.dumps(diffs)
            return "threads", detail, self.op_of(program, where), kres
        return kind, detail, self.op_of(program, where), kres

    def check_with_recheck(self, program):
        kind, detail, op, kres = self.check(program)
        if kind in ("mismatch", "grad-mismatch") and any(
                i["dtype"] == "float32" for i in program["inputs"]):
            wide = dict(program, inputs=[dict(i, dtype="float64") if i["dtype"] == "float32"
                                         else i for i in program["inputs"]])
            if self.check(wide, [self.threads[0]])[0] == "pass":
                return "f32-rounding", detail, op, kres
        return kind, detail, op, kres

    def is_known(self, kind, op, detail, program):
        noncontig = any(i.get("layout", "contiguous") != "contiguous" for i in program["inputs"])
        mutated = any(i["shape"] != self.by_id[i["sample"]]["inputs"][i["arg"]]["shape"]
                      for i in program["inputs"])
        exprs = " ".join(self.by_id[s["call"]]["torch"] for s in program["steps"] if "call" in s)
        return any(k["kind"] in ("*", kind) and k["op"] in ("*", op) and k.get("match", "") in detail
                   and k.get("torch_contains", "") in exprs
                   and (noncontig or not k.get("needs_noncontiguous_input"))
                   and (mutated or not k.get("needs_mutated_shape"))
                   and (not k.get("sample") or any(s.get("call", "").startswith(k["sample"])
                                                   for s in program["steps"]))
                   for k in self.known)

    def shrink(self, program, kind, op):
        def still_fails(cand):  # with the float64 re-check, so it cannot shrink onto rounding
            k, _, o, _ = self.check_with_recheck(cand)
            return k == kind and o == op
        return fuzz_shrink.shrink(program, still_fails, self.by_id)


def parse_seeds(text):
    lo, _, hi = text.partition("-")
    return range(int(lo), int(hi or lo) + 1)


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--worker", required=True)
    ap.add_argument("--seeds", default="1-300")
    ap.add_argument("--campaign", type=int, default=0, help="run N seeds from --start")
    ap.add_argument("--start", type=int, default=100000)
    ap.add_argument("--out", default="fuzz_out")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--no-shrink", action="store_true")
    ap.add_argument("--max-seconds", type=float, default=0)
    ap.add_argument("--replay")
    ap.add_argument("--verbose", action="store_true")
    args = ap.parse_args(argv)
    try:
        import torch  # noqa: F401 - checked here, used by fuzz_torch.py's process
    except Exception as e:  # noqa: BLE001
        print(f"fuzz: cannot import torch with {sys.executable} ({e}); install python3-torch and "
              "run with /usr/bin/python3")
        return 2
    catalog_text = subprocess.run([args.worker, "catalog"], check=True, capture_output=True,
                                  text=True).stdout
    catalog = json.loads(catalog_text)
    os.makedirs(args.out, exist_ok=True)
    catalog_path = os.path.join(args.out, "catalog.json")
    with open(catalog_path, "w") as f:
        f.write(catalog_text)
    with open(os.path.join(HERE, "known_differences.json")) as f:
        known = json.load(f)["differences"]
    threads = [int(t) for t in args.threads.split(",")]
    fz = Fuzzer(TorchSide(catalog_path), Worker(args.worker), catalog, threads, known)
    if args.replay:
        with open(args.replay) as f:
            program = json.load(f)
        kind, detail, op, _ = fz.check_with_recheck(program.get("program", program))
        print(f"{kind} [{op}] {detail}")
        return 0 if kind in ("pass", "both-reject", "f32-rounding", "nonfinite-grad") else 1
    seeds = (range(args.start, args.start + args.campaign) if args.campaign
             else parse_seeds(args.seeds))
    return run_seeds(fz, seeds, args)


def run_seeds(fz, seeds, args):
    os.makedirs(args.out, exist_ok=True)
    counts, groups, ops_seen = {}, {}, {}
    t0 = time.time()
    n = 0
    for seed in seeds:
        if args.max_seconds and time.time() - t0 > args.max_seconds:
            print(f"fuzz: stopping after {args.max_seconds:.0f} s")
            break
        n += 1
        program = fuzz_gen.generate(fz.catalog, seed)
        kind, detail, op, kres = fz.check_with_recheck(program)
        for s in program["steps"]:
            name = s["call"].split("/")[0] if "call" in s else s["inplace"]
            ops_seen[name] = ops_seen.get(name, 0) + 1
        if kind in FAILURE_KINDS and fz.is_known(kind, op, detail, program):
            kind = "known"
        counts[kind] = counts.get(kind, 0) + 1
        if args.verbose:
            print(f"seed {seed}: {kind} [{op}] {detail[:200]}")
        if kind not in FAILURE_KINDS:
            continue
        key = (kind, op)
        if key in groups:
            groups[key]["seeds"].append(seed)
            continue
        small = program if args.no_shrink else fz.shrink(program, kind, op)
        skind, sdetail, _, skres = fz.check(small)
        groups[key] = {"seeds": [seed], "detail": sdetail or detail, "program": small}
        write_failure(fz, args.out, kind, op, seed, small, skres, sdetail or detail)
        print(f"FAIL seed {seed}: {kind} [{op}] {detail[:300]}")
    print_table(counts, groups, ops_seen, n, time.time() - t0, fz)
    return 1 if groups else 0


def write_failure(fz, out, kind, op, seed, program, kres, detail):
    stem = os.path.join(out, f"{kind}-{op.replace('/', '_')}-{seed}")
    with open(stem + ".json", "w") as f:
        json.dump({"kind": kind, "op": op, "seed": seed, "detail": detail, "program": program},
                  f, indent=1)
    if "inputs" in kres:
        with open(stem + ".py", "w") as f:
            f.write(fuzz_shrink.to_pytorch(program, kres["inputs"], fz.by_id))
        with open(stem + ".cpp", "w") as f:
            f.write(fuzz_shrink.to_cpp(program, kres["inputs"], fz.by_id))


def print_table(counts, groups, ops_seen, n, seconds, fz):
    print(f"\nfuzz: {n} programs in {seconds:.1f} s, {len(fz.catalog)} samples of "
          f"{len({s['op'] for s in fz.catalog})} ops in the catalog, "
          f"{len(ops_seen)} ops and in-place methods drawn")
    print(f"{'outcome':<16}{'programs':>10}")
    for kind in ("pass", "both-reject", "f32-rounding", "nonfinite-grad", "threads-declared",
                 "known") + FAILURE_KINDS:
        if kind in counts:
            print(f"{kind:<16}{counts[kind]:>10}")
    if groups:
        print(f"\n{'failure':<16}{'op':<28}{'programs':>9}  {'first seed':>10}  steps  detail")
        for (kind, op), g in sorted(groups.items()):
            print(f"{kind:<16}{op:<28}{len(g['seeds']):>9}  {g['seeds'][0]:>10}  "
                  f"{len(g['program']['steps']):>5}  {g['detail'][:150]}")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
