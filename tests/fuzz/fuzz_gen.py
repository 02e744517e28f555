"""Random op programs drawn from kiln's op registry (Note [fuzz programs] in program.h).

The catalog (kiln_fuzz_worker catalog) lists every registered op sample that has a PyTorch
expression, with its inputs' shapes, dtypes, layouts and value ranges. A program is 3-12 steps.
Each step calls a sample on values of the program (outputs of earlier steps whose shape fits) or on
fresh inputs derived from the sample's own: sometimes with a mutated shape (a dim set to 0 or 1,
one added or dropped), another dtype (the other float width, an integer, bool), another layout
(transposed, strided, channels-last, expanded); or it changes a value in place. Mutations produce
both valid programs and programs PyTorch rejects; kiln must reject those at the same step.
Nothing here names an op: a newly registered sample is fuzzed as soon as it has a torch expression.
"""

import random

FLOAT = ("float16", "bfloat16", "float32", "float64")
INPLACE = ("add_", "sub_", "mul_", "div_", "clamp_", "zero_", "fill_", "copy_")
SCALARS = (0.5, -1.5, 2.0, 3.0, -0.25, 0.0)


def is_float(dtype):
    return dtype in FLOAT


def mutate_shape(rng, shape):
    shape = list(shape)
    kind = rng.choice(("zero", "one", "prepend", "drop", "grow"))
    if not shape:
        return rng.choice(([1], [0], [2]))
    i = rng.randrange(len(shape))
    if kind == "zero":
        shape[i] = 0
    elif kind == "one":
        shape[i] = 1
    elif kind == "prepend":
        shape.insert(0, rng.choice((1, 2)))
    elif kind == "drop":
        del shape[i]
    else:
        shape[i] += 1
    return shape


def pick_dtype(rng, spec, mode, rate):
    dtype = spec["dtype"]
    if dtype != "float64":
        return dtype  # a sample that passes another dtype on purpose keeps it
    r = rng.random()
    if r >= rate:
        return mode
    if r < rate * 0.6:
        return "float64" if mode == "float32" else "float32"
    return "int64" if r < rate * 0.85 else "bool"


def pick_layout(rng, spec, shape):
    rank = len(shape)
    if not spec["contiguous"] and shape == spec["shape"] and rng.random() < 0.6:
        return "sample"
    choices = ["contiguous"] * 5
    if rank >= 2:
        choices.append("transposed")
    if rank >= 1:
        choices += ["strided", "expanded"]
    if rank == 4:
        choices += ["channels_last"] * 2
    return rng.choice(choices)


class Builder:
    """Collects inputs and steps with symbolic value references, numbered at the end."""

    def __init__(self, rng, mode):
        self.rng, self.mode = rng, mode
        # Half the programs are well-formed; the rest mutate shapes and dtypes now and then, which
        # yields the programs that both sides must reject at the same step.
        self.shape_rate = rng.choice((0.0, 0.0, 0.05, 0.15))
        self.dtype_rate = rng.choice((0.0, 0.0, 0.1, 0.2))
        self.inputs, self.steps = [], []
        self.values = []  # {"ref", "shape" (None when unknown), "dtype", "float"}

    def fresh(self, sample, arg):
        rng, spec = self.rng, sample["inputs"][arg]
        shape = list(spec["shape"])
        if rng.random() < self.shape_rate:
            shape = mutate_shape(rng, shape)
        dtype = pick_dtype(rng, spec, self.mode, self.dtype_rate)
        grad_ok = not sample["grad_inputs"] or arg in sample["grad_inputs"]
        self.inputs.append({
            "sample": sample["id"], "arg": arg, "shape": shape, "dtype": dtype,
            "layout": pick_layout(rng, spec, shape), "seed": rng.randrange(1 << 30),
            "requires_grad": is_float(dtype) and grad_ok and rng.random() < 0.85,
        })
        ref = ("in", len(self.inputs) - 1)
        self.values.append({"ref": ref, "shape": shape if shape == spec["shape"] else None,
                            "dtype": dtype, "float": is_float(dtype)})
        return ref, shape == spec["shape"]

    def chainable(self, spec):
        """Values that can stand in for a sample input: same shape, floating, and an input whose
        own values span negatives (so a domain-limited op such as log is not fed arbitrary ones)."""
        if not is_float(spec["dtype"]) or spec["min"] >= 0:
            return []
        return [v["ref"] for v in self.values if v["float"] and v["shape"] == spec["shape"]]

    def call(self, sample):
        args, known = [], True
        for i, spec in enumerate(sample["inputs"]):
            candidates = self.chainable(spec)
            if candidates and self.rng.random() < 0.8:
                args.append(self.rng.choice(candidates))
            else:
                ref, same = self.fresh(sample, i)
                args.append(ref)
                known &= same
        k = len(self.steps)
        self.steps.append({"call": sample["id"], "args": args})
        for j, out in enumerate(sample["outputs"]):
            dtype = out["dtype"]
            if is_float(dtype) and dtype == "float64":
                dtype = self.mode
            self.values.append({"ref": ("out", k, j), "shape": out["shape"] if known else None,
                                "dtype": dtype, "float": is_float(dtype)})

    def inplace(self):
        rng = self.rng
        target = rng.choice(self.values)
        method = rng.choice(INPLACE)
        step = {"inplace": method, "target": target["ref"]}
        same = [v["ref"] for v in self.values
                if target["shape"] is not None and v["shape"] == target["shape"]]
        if method == "copy_" and not same:
            method = step["inplace"] = "fill_"
        if method == "copy_" or (method in ("add_", "sub_", "mul_", "div_") and same
                                 and rng.random() < 0.3):
            step["other"] = rng.choice(same)
        elif method == "clamp_":
            lo = rng.choice((-1.0, -0.5, 0.0))
            step["min"], step["max"] = lo, lo + rng.choice((0.5, 1.0, 2.0))
        elif method != "zero_":
            step["scalar"] = rng.choice(SCALARS)
        self.steps.append(step)

    def finish(self, seed):
        """Numbers the values: inputs first, then every output of every call step in order."""
        n_in = len(self.inputs)
        number, next_out = {}, n_in
        for i in range(n_in):
            number[("in", i)] = i
        for k, step in enumerate(self.steps):
            if "call" in step:
                for v in self.values:
                    if v["ref"][0] == "out" and v["ref"][1] == k:
                        number[v["ref"]] = next_out
                        next_out += 1
        steps = []
        for step in self.steps:
            s = dict(step)
            if "args" in s:
                s["args"] = [number[r] for r in s["args"]]
            for key in ("target", "other"):
                if key in s:
                    s[key] = number[s[key]]
            steps.append(s)
        has_inplace = any("inplace" in s for s in steps)
        return {"seed": seed, "mode": self.mode, "inputs": self.inputs, "steps": steps,
                "loss_seed": seed % 997 + 1, "retain_grads": not has_inplace}


def generate(catalog, seed):
    rng = random.Random(seed)
    b = Builder(rng, "float32" if rng.random() < 0.8 else "float64")
    for _ in range(rng.randint(3, 12)):
        if b.values and rng.random() < 0.15:
            b.inplace()
            continue
        sample = None
        if b.values and rng.random() < 0.6:
            # Prefer a sample that can consume a value already in the program.
            fits = [s for s in catalog if any(b.chainable(spec) for spec in s["inputs"])]
            if fits:
                sample = rng.choice(fits)
        b.call(sample or rng.choice(catalog))
    return b.finish(seed)
