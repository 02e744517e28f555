"""Replays a fuzz program in PyTorch and compares it with kiln's result.

The inputs are rebuilt from kiln's report of each input's storage, strides and offset
(torch.as_strided), so both frameworks see the same memory layout. Each step evaluates the
sample's torch expression over a0, a1, ...; the loss and its weights follow program.cpp exactly
(weights come from kiln's sample_tensor generator, reimplemented here).
"""

import math

M64 = (1 << 64) - 1
RTOL = {"float64": 1e-9, "float32": 1e-4, "float16": 1e-2, "bfloat16": 5e-2}


def sample_values(n, seed, low, high):
    """kiln::sample_tensor's values (SplitMix64), bit for bit."""
    state = (seed * 0x2545F4914F6CDD1D + 1) & M64
    out = []
    for _ in range(n):
        state = (state + 0x9E3779B97F4A7C15) & M64
        z = state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
        z ^= z >> 31
        out.append(low + (high - low) * ((z >> 11) * 2.0 ** -53))
    return out


def cpp_number(c):
    """What a C++ double means to kiln (Note [C++ number operands] in kiln/ops/binary.h): an
    integral value is an int64 scalar, as a Python int is to PyTorch."""
    return int(c) if float(c).is_integer() else c


def decode(values):
    return [float(v) if isinstance(v, str) else v for v in values]


class TorchRunner:
    def __init__(self, torch, catalog):
        self.torch = torch
        self.exprs = {s["id"]: s["torch"] for s in catalog}
        self.dtypes = {
            "bool": torch.bool, "uint8": torch.uint8, "int8": torch.int8, "int32": torch.int32,
            "int64": torch.int64, "float16": torch.float16, "bfloat16": torch.bfloat16,
            "float32": torch.float32, "float64": torch.float64,
        }
        self.names = {v: k for k, v in self.dtypes.items()}

    def build_input(self, enc):
        torch = self.torch
        dtype = self.dtypes[enc["dtype"]]
        vals = decode(enc["storage"])
        if enc["dtype"] in RTOL:
            storage = torch.tensor(vals, dtype=torch.float64).to(dtype)
        elif enc["dtype"] == "bool":
            storage = torch.tensor(vals, dtype=torch.bool)
        else:
            storage = torch.tensor(vals, dtype=torch.int64).to(dtype)
        t = storage.as_strided(enc["shape"], enc["strides"], enc["offset"]).detach()
        if enc["requires_grad"]:
            t.requires_grad_(True)
        return t

    def inplace(self, step, values):
        t = values[step["target"]]
        m = step["inplace"]
        other = values[step["other"]] if "other" in step else None
        c = cpp_number(step.get("scalar", 0.0))
        if m in ("add_", "sub_", "mul_", "div_"):
            getattr(t, m)(other if other is not None else c)
        elif m == "clamp_":
            t.clamp_(cpp_number(step.get("min", -0.5)), cpp_number(step.get("max", 0.5)))
        elif m == "zero_":
            t.zero_()
        elif m == "fill_":
            t.fill_(c)
        elif m == "copy_":
            t.copy_(other)
        else:
            raise ValueError(f"unknown in-place method {m}")

    def run(self, program, kiln_inputs):
        """Returns {"error": {"step", "message"}} or {"values": [...], "grads": {...}} with
        torch tensors (not encoded)."""
        torch = self.torch
        values = [self.build_input(e) for e in kiln_inputs]
        n_in = len(values)
        retain = program.get("retain_grads", True)
        steps = program["steps"]
        env_base = {"torch": torch, "F": torch.nn.functional, "math": math}
        for k, step in enumerate(steps):
            try:
                if "inplace" in step:
                    self.inplace(step, values)
                    continue
                env = {f"a{i}": values[a] for i, a in enumerate(step["args"])}
                r = eval(self.exprs[step["call"]], env_base, env)
                outs = list(r) if isinstance(r, (tuple, list)) else [r]
                # One sample is one op: its output requires grad only if an input does (a torch
                # expression may take a gradient at an internal point that requires grad).
                any_rg = any(values[a].requires_grad for a in step["args"])
                for n, o in enumerate(outs):
                    if not isinstance(o, torch.Tensor):
                        raise TypeError(f"torch expression gave {type(o).__name__}")
                    if not any_rg and o.requires_grad:
                        o = outs[n] = o.detach()
                    if retain and o.requires_grad and not o.is_leaf:
                        o.retain_grad()
                    values.append(o)
            except Exception as e:  # noqa: BLE001 - any rejection is a result to compare
                return {"error": {"step": k, "message": f"{type(e).__name__}: {e}"}}
        try:
            loss = None
            loss_seed = program.get("loss_seed", 1)
            for j in range(n_in, len(values)):
                v = values[j]
                if not (v.dtype.is_floating_point and v.requires_grad):
                    continue
                w = torch.tensor(sample_values(v.numel(), loss_seed * 1000 + j, 0.5, 1.5),
                                 dtype=torch.float64).reshape(v.shape).to(v.dtype)
                term = (v * w).sum()
                loss = term if loss is None else loss + term
            if loss is not None:
                loss.backward()
        except Exception as e:  # noqa: BLE001
            return {"error": {"step": len(steps), "message": f"{type(e).__name__}: {e}"}}
        same_as = {}
        for j, v in enumerate(values):
            for k in range(j):
                if values[k] is v:
                    same_as[j] = k
                    break
        grads = {}
        for j, v in enumerate(values):
            wanted = v.requires_grad if j < n_in else (retain and v.retains_grad)
            if wanted:
                grads[str(j)] = v.grad
        return {"values": values, "grads": grads, "same_as": same_as}


def flat(torch, t):
    t = t.detach().reshape(-1)
    if t.dtype.is_floating_point:
        return t.to(torch.float64).tolist()
    if t.dtype == torch.bool:
        return t.tolist()
    return t.to(torch.int64).tolist()


def close(kiln, ref, dtype):
    """|k - t| <= rtol * (|t| + scale), scale = max(1, max finite |t|); NaN meets NaN."""
    if dtype not in RTOL:
        return kiln == ref, 0.0 if kiln == ref else math.inf
    rtol = RTOL[dtype]
    scale = max([1.0] + [abs(t) for t in ref if math.isfinite(t)])
    worst = 0.0
    for k, t in zip(kiln, ref):
        if math.isnan(t) or math.isnan(k):
            if not (math.isnan(t) and math.isnan(k)):
                return False, math.inf
            continue
        if math.isinf(t) or math.isinf(k):
            if k != t:
                return False, math.inf
            continue
        worst = max(worst, abs(k - t) / (abs(t) + scale))
    return worst <= rtol, worst


def compare_tensor(torch, names, what, enc, ref, rtol_dtype=None):
    """A description of how kiln's encoded tensor differs from torch's, or None. rtol_dtype, when
    given, is the dtype whose tolerance applies (a float64 result computed from float32 values)."""
    ref_dtype = names.get(ref.dtype, str(ref.dtype))
    if enc["dtype"] != ref_dtype:
        return f"{what}: dtype kiln {enc['dtype']} vs torch {ref_dtype}"
    if list(enc["shape"]) != list(ref.shape):
        return f"{what}: shape kiln {enc['shape']} vs torch {list(ref.shape)}"
    tol = rtol_dtype if rtol_dtype and ref_dtype in RTOL else ref_dtype
    ok, worst = close(decode(enc["values"]), flat(torch, ref), tol)
    if not ok:
        return f"{what} ({ref_dtype}{list(ref.shape)}): relative error {worst:.3e}"
    return None


def nonfinite(enc):
    return any(isinstance(v, str) for v in enc["values"])


def compare(torch, names, kres, tres):
    """Returns (kind, detail, where): kind is 'pass', 'both-reject' or a failure kind; `where` is
    the value index or step index that differs first (for triage)."""
    kerr, terr = kres.get("error"), tres.get("error")
    if kerr and kerr["kind"] != "error":
        return kerr["kind"], kerr["message"], ("step", kerr["step"])
    if kerr or terr:
        if kerr and terr and kerr["step"] == terr["step"]:
            return "both-reject", "", ("step", kerr["step"])
        if kerr and (not terr or kerr["step"] < terr["step"]):
            return ("kiln-rejects", f"kiln: {kerr['message']} | torch: "
                    f"{terr['message'] if terr else 'accepted'}", ("step", kerr["step"]))
        return ("torch-rejects", f"torch: {terr['message']} | kiln: "
                f"{kerr['message'] if kerr else 'accepted'}", ("step", terr["step"]))
    kvals, tvals = kres["values"], tres["values"]
    if len(kvals) != len(tvals):
        return "outputs", f"kiln made {len(kvals)} values, torch {len(tvals)}", ("value", 0)
    # A program that mixes float widths is held to the narrowest width's tolerance everywhere:
    # a float64 result computed from float32 values carries float32 rounding.
    widths = {k["dtype"] for k in kvals if k["dtype"] in RTOL}
    narrowest = max(widths, key=lambda d: RTOL[d]) if widths else None
    for j, (k, t) in enumerate(zip(kvals, tvals)):
        d = compare_tensor(torch, names, f"value {j}", k, t, narrowest)
        if d is None and k["dtype"] in RTOL and k["requires_grad"] != t.requires_grad:
            d = f"value {j}: requires_grad kiln {k['requires_grad']} vs torch {t.requires_grad}"
        if d:
            return "mismatch", d, ("value", j)
    kg, tg = kres["grads"], tres["grads"]
    # A value that is the same tensor as another on either side (an op returned its input): the
    # retained gradient then belongs to both, so such values are not compared.
    aliased = set()
    for j, k in enumerate(kvals):
        if "same_as" in k:
            aliased |= {j, k["same_as"]}
    for j, k in tres.get("same_as", {}).items():
        aliased |= {j, k}
    n_in = len(kres["inputs"])
    for key in sorted(set(kg) | set(tg), key=int):
        j = int(key)
        if j in aliased and j >= n_in:
            continue
        ref = tg.get(key)
        if ref is None:
            ref = torch.zeros_like(tvals[j])
        enc = kg.get(key)
        if enc is None:
            enc = {"dtype": kvals[j]["dtype"], "shape": kvals[j]["shape"],
                   "values": [0.0] * ref.numel()}
        d = compare_tensor(torch, names, f"grad of value {j}", enc, ref, narrowest)
        if d:
            # Once the program computed an inf or nan, where gradients get inf or nan depends on
            # how each framework arranges the same arithmetic (inf * 0, inf - inf): reported, not
            # a failure. Gradients of programs whose values are all finite must agree.
            if d.endswith("relative error inf") and (kres.get("nonfinite_seen")
                                                     or any(nonfinite(k) for k in kvals)):
                return "nonfinite-grad", d, ("value", j)
            return "grad-mismatch", d, ("value", j)
    return "pass", "", None


def serve(catalog_path):
    """The PyTorch side as a process of its own (fuzz.py starts it), so that a PyTorch crash on a
    strange program (it has corrupted its heap on out-of-range pooling indices) loses one program,
    not the run. Reads {"program", "kres"} lines, answers {"kind", "detail", "where"} lines."""
    import json
    import sys
    import warnings
    import torch
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore")  # PyTorch's advice (broadcasting targets) is not a result
    with open(catalog_path) as f:
        runner = TorchRunner(torch, json.load(f))
    for line in sys.stdin:
        req = json.loads(line)
        tres = runner.run(req["program"], req["kres"]["inputs"])
        kind, detail, where = compare(torch, runner.names, req["kres"], tres)
        sys.stdout.write(json.dumps({"kind": kind, "detail": detail, "where": where}) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    import sys as _sys
    serve(_sys.argv[1])
