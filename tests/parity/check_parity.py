#!/usr/bin/python3
"""Replays the cases written by kiln_parity_dump in PyTorch and compares outputs and gradients.

Usage:
  /usr/bin/python3 check_parity.py PARITY.json [--filter SUBSTRING] [--verbose]
  /usr/bin/python3 check_parity.py --self-test

Run it with Debian's interpreter (/usr/bin/python3, package python3-torch): the `python3` first on
PATH may be another interpreter that does not see Debian's packages.

Comparison criterion (per tensor, elementwise over the flattened values; `t` = torch, `k` = kiln):

    |k - t| <= rtol * (|t| + scale),   scale = max(1, max |t| over the finite values of the tensor)

i.e. a relative tolerance `rtol` plus an absolute one of `rtol * scale`, so values that cancel to
near zero inside a tensor of larger values are judged against that tensor's magnitude. rtol by dtype:
float64 1e-10, float32 1e-5, float16 1e-3, bfloat16 1e-2. NaN must meet NaN and an infinity the
same infinity. Integer and bool tensors must be equal. Shapes and dtypes must be equal.
A gradient that one side reports as undefined (kiln null / torch None) counts as zeros.
"""

import json
import math
import sys
import traceback

RTOL = {"float64": 1e-10, "float32": 1e-5, "float16": 1e-3, "bfloat16": 1e-2}
FLOAT_DTYPES = set(RTOL)


def decode_values(values):
    # Non-finite floats are stored as the strings "nan", "inf", "-inf" (JSON has no NaN).
    return [float(v) if isinstance(v, str) else v for v in values]


def compare_values(kiln, ref, dtype):
    """Compares flat lists of numbers. Returns (ok, max_abs_err, max_rel_err, rtol)."""
    if len(kiln) != len(ref):
        return False, math.inf, math.inf, None
    if dtype not in FLOAT_DTYPES:
        bad = [i for i, (k, t) in enumerate(zip(kiln, ref)) if k != t]
        max_abs = max((abs(float(kiln[i]) - float(ref[i])) for i in bad), default=0.0)
        return not bad, max_abs, (math.inf if bad else 0.0), 0.0
    rtol = RTOL[dtype]
    finite = [abs(t) for t in ref if math.isfinite(t)]
    scale = max([1.0] + finite)
    ok, max_abs, max_rel = True, 0.0, 0.0
    for k, t in zip(kiln, ref):
        if math.isnan(t) or math.isnan(k):
            if not (math.isnan(t) and math.isnan(k)):
                ok, max_abs, max_rel = False, math.inf, math.inf
            continue
        if math.isinf(t) or math.isinf(k):
            if k != t:
                ok, max_abs, max_rel = False, math.inf, math.inf
            continue
        err = abs(k - t)
        max_abs = max(max_abs, err)
        max_rel = max(max_rel, err / abs(t) if t != 0 else (0.0 if err == 0 else math.inf))
        if err > rtol * (abs(t) + scale):
            ok = False
    return ok, max_abs, max_rel, rtol


def self_test():
    base = [0.5, -1.25, 2.0, 3.0, 1e-3]
    big = [v * 1e4 for v in base]
    nan = float("nan")
    # (name, kiln values, torch values, dtype, expected verdict)
    checks = [
        ("float32 1e-4 relative error is flagged", [v * (1 + 1e-4) for v in base], base,
         "float32", False),
        ("float32 1e-7 relative error is accepted", [v * (1 + 1e-7) for v in base], base,
         "float32", True),
        ("float32 single value 1e-4 off is flagged", [1.0 + 1e-4], [1.0], "float32", False),
        ("float32 large values 1e-4 off are flagged", [v * (1 + 1e-4) for v in big], big,
         "float32", False),
        ("float32 large values 1e-7 off are accepted", [v * (1 + 1e-7) for v in big], big,
         "float32", True),
        ("float64 1e-7 relative error is flagged", [v * (1 + 1e-7) for v in base], base,
         "float64", False),
        ("float64 1e-12 relative error is accepted", [v * (1 + 1e-12) for v in base], base,
         "float64", True),
        ("NaN meets NaN", [nan, 1.0], [nan, 1.0], "float32", True),
        ("NaN against a number", [nan], [1.0], "float32", False),
        ("inf against -inf", [math.inf], [-math.inf], "float32", False),
        ("int mismatch", [1, 2], [1, 3], "int64", False),
        ("bool equal", [True, False], [True, False], "bool", True),
        ("length mismatch", [1.0], [1.0, 2.0], "float32", False),
    ]
    failures = 0
    for name, kiln, ref, dtype, want in checks:
        got = compare_values(kiln, ref, dtype)[0]
        if got != want:
            failures += 1
            print(f"self-test FAILED: {name} (compare returned {got}, expected {want})")
    print(f"self-test: {len(checks) - failures} passed, {failures} failed")
    return 1 if failures else 0


def import_torch():
    try:
        import torch  # noqa: F401
    except Exception as e:  # ImportError, or a broken install
        print(f"check_parity: cannot import torch with {sys.executable} ({e}).\n"
              "Install Debian's PyTorch (`apt-get install python3-torch`) and run this script "
              "with /usr/bin/python3.")
        sys.exit(2)
    return torch


class Checker:
    def __init__(self, torch, verbose):
        self.torch = torch
        self.verbose = verbose
        self.dtypes = {
            "bool": torch.bool, "uint8": torch.uint8, "int8": torch.int8, "int32": torch.int32,
            "int64": torch.int64, "float16": torch.float16, "bfloat16": torch.bfloat16,
            "float32": torch.float32, "float64": torch.float64,
        }
        self.names = {v: k for k, v in self.dtypes.items()}

    def build(self, enc, requires_grad=False):
        torch = self.torch
        dtype = enc["dtype"]
        values = decode_values(enc["values"])
        if dtype in FLOAT_DTYPES:
            t = torch.tensor(values, dtype=torch.float64).to(self.dtypes[dtype])
        elif dtype == "bool":
            t = torch.tensor(values, dtype=torch.bool)
        else:
            t = torch.tensor(values, dtype=torch.int64).to(self.dtypes[dtype])
        t = t.reshape(enc["shape"]).clone()
        if requires_grad:
            t.requires_grad_(True)
        return t

    def flat(self, t):
        t = t.detach().reshape(-1)
        if t.dtype.is_floating_point:
            return t.to(self.torch.float64).tolist()
        if t.dtype == self.torch.bool:
            return t.tolist()
        return t.to(self.torch.int64).tolist()

    def compare(self, errors, what, kiln_enc, ref):
        """Appends to errors a description of each disagreement between kiln_enc and tensor ref."""
        ref_dtype = self.names.get(ref.dtype, str(ref.dtype))
        if kiln_enc["dtype"] != ref_dtype:
            errors.append(f"{what}: dtype kiln {kiln_enc['dtype']} vs torch {ref_dtype}")
            return
        if list(kiln_enc["shape"]) != list(ref.shape):
            errors.append(f"{what}: shape kiln {kiln_enc['shape']} vs torch {list(ref.shape)}")
            return
        ok, max_abs, max_rel, rtol = compare_values(decode_values(kiln_enc["values"]),
                                                    self.flat(ref), ref_dtype)
        if not ok:
            errors.append(f"{what} ({ref_dtype}{list(ref.shape)}): max abs err {max_abs:.3e}, "
                          f"max rel err {max_rel:.3e} (rtol {rtol})")

    def run(self, case):
        """Returns the list of disagreements of one case (empty when it passes)."""
        torch = self.torch
        if "error" in case:
            return [f"kiln raised: {case['error']}"]
        inputs = [self.build(e, e["requires_grad"]) for e in case["inputs"]]
        env = {f"a{i}": t for i, t in enumerate(inputs)}
        try:
            with torch.enable_grad():
                result = eval(case["torch"], {"torch": torch, "F": torch.nn.functional,
                                              "math": math}, env)
        except Exception as e:
            return [f"torch expression raised {type(e).__name__}: {e}"]
        outs = list(result) if isinstance(result, (tuple, list)) else [result]
        if not all(isinstance(o, torch.Tensor) for o in outs):
            return [f"torch expression gave {type(result).__name__}, not tensors"]
        errors = []
        kouts = case["outputs"]
        if len(outs) != len(kouts):
            return [f"kiln gave {len(kouts)} outputs, torch {len(outs)}"]
        for i, (k, t) in enumerate(zip(kouts, outs)):
            self.compare(errors, f"output {i}", k, t)
            if k["dtype"] in FLOAT_DTYPES and k["requires_grad"] != t.requires_grad:
                errors.append(f"output {i}: requires_grad kiln {k['requires_grad']} vs torch "
                              f"{t.requires_grad}")
        if errors:
            return errors

        if "grad_error" in case:
            return [f"kiln backward raised: {case['grad_error']}"]
        diff = [i for i, k in enumerate(kouts) if k["requires_grad"]]
        leaves = [i for i, e in enumerate(case["inputs"]) if e["requires_grad"]]
        if not diff or not leaves:
            return []
        seeds = [self.build(case["seeds"][i]) for i in diff]
        try:
            tgrads = torch.autograd.grad([outs[i] for i in diff], [inputs[i] for i in leaves],
                                         seeds, allow_unused=True)
        except Exception as e:
            return [f"torch backward raised {type(e).__name__}: {e}"]
        for i, tg in zip(leaves, tgrads):
            inp = inputs[i]
            if tg is None:
                tg = torch.zeros_like(inp)
            kg = case["grads"][i]
            if kg is None:
                kg = {"dtype": case["inputs"][i]["dtype"], "shape": case["inputs"][i]["shape"],
                      "values": [0.0] * inp.numel()}
            self.compare(errors, f"grad of input {i}", kg, tg)
        return errors


def main(argv):
    if "--self-test" in argv:
        return self_test()
    args = [a for a in argv if not a.startswith("--")]
    verbose = "--verbose" in argv
    substring = ""
    if "--filter" in argv:
        idx = argv.index("--filter")
        substring = argv[idx + 1]
        args.remove(substring)
    if len(args) != 1:
        print(__doc__)
        return 2
    torch = import_torch()
    torch.set_num_threads(2)
    with open(args[0]) as f:
        data = json.load(f)
    cases = [c for c in data.get("cases", []) if substring in f"{c['op']}/{c['label']}"]
    if not cases:
        print(f"check_parity: no cases in {args[0]}; the registry has no samples with a torch "
              "expression (or the filter matched none)")
        print("parity: 0 passed, 0 failed")
        return 1
    checker = Checker(torch, verbose)
    passed = failed = 0
    for case in cases:
        name = f"{case['op']}/{case['label']} [{case['mode']}] `{case['torch']}`"
        try:
            errors = checker.run(case)
        except Exception:
            errors = ["harness error:\n" + traceback.format_exc()]
        if errors:
            failed += 1
            for e in errors:
                print(f"FAIL {name}: {e}")
        else:
            passed += 1
            if verbose:
                print(f"ok   {name}")
    print(f"parity: {passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
