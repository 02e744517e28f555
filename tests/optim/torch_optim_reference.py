#!/usr/bin/python3
"""Replays kiln's optimizer, LR scheduler and gradient clipping cases in PyTorch.

Usage: /usr/bin/python3 torch_optim_reference.py IN.json OUT.json

Run it with Debian's interpreter (/usr/bin/python3, package python3-torch): the `python3` first on
PATH may be another interpreter that does not see Debian's packages. The kiln tests in
tests/optim write IN.json, run this script and compare against OUT.json themselves.

IN.json: {"cases": [case, ...]} where a case is one of
  {"kind": "optimizer", "name", "optimizer": "SGD"|"Adam"|"AdamW"|"RMSprop"|"Adagrad",
   "dtype": "float32"|"float64", "params": [{"shape", "values"}], "groups": [{"params": [index],
   "options": {torch kwargs}}], "grads": [[null | [values] per param] per step]}
      -> {"name", "params": [[[values] per param] per step]}  (the parameters after every step)
  {"kind": "scheduler", "name", "optimizer", "group_options": [{torch kwargs incl. lr}],
   "scheduler": class name in torch.optim.lr_scheduler, "args": {kwargs}, "steps": N,
   "metrics": [N numbers] (ReduceLROnPlateau only)}
      -> {"name", "lrs": [[lr per group] for the initial state and each step],
          "momenta": same for "momentum" / betas[0]}
  {"kind": "clip", "name", "dtype", "mode": "norm"|"value", "args": {kwargs},
   "grads": [null | {"shape", "values"}]}
      -> {"name", "total_norm": number | null, "grads": [null | [values]]}
Non-finite floats are written as the strings "nan", "inf", "-inf".
"""

import json
import math
import sys
import warnings

INSTALL_HINT = (
    "torch_optim_reference.py: cannot import torch. Install Debian's PyTorch with "
    "`apt-get install python3-torch` and run this script with /usr/bin/python3 (the python3 "
    "first on PATH may be a different interpreter without Debian's packages)."
)

try:
    import torch
except ImportError:  # pragma: no cover - depends on the machine
    print(INSTALL_HINT, file=sys.stderr)
    sys.exit(3)

DTYPES = {"float32": torch.float32, "float64": torch.float64}


def encode(values):
    out = []
    for v in values:
        v = float(v)
        if math.isnan(v):
            out.append("nan")
        elif math.isinf(v):
            out.append("inf" if v > 0 else "-inf")
        else:
            out.append(v)
    return out


def make_tensor(shape, values, dtype):
    return torch.tensor(values, dtype=torch.float64).reshape(shape).to(dtype)


def flat(t):
    return encode(t.detach().to(torch.float64).reshape(-1).tolist())


def make_optimizer(name, groups, **defaults):
    cls = getattr(torch.optim, name)
    if name == "SGD" and "lr" not in defaults:
        defaults["lr"] = groups[0]["lr"]
    if name in ("SGD", "Adam", "AdamW", "RMSprop", "Adagrad"):
        defaults.setdefault("foreach", False)  # the single-tensor implementation kiln mirrors
    return cls(groups, **defaults)


def run_optimizer(case):
    dtype = DTYPES[case["dtype"]]
    params = [make_tensor(p["shape"], p["values"], dtype).requires_grad_(True)
              for p in case["params"]]
    groups = []
    for g in case["groups"]:
        options = dict(g["options"])
        if "betas" in options:
            options["betas"] = tuple(options["betas"])
        groups.append(dict(params=[params[i] for i in g["params"]], **options))
    # The first group's options double as the constructor's defaults: PyTorch's Adagrad fills
    # every accumulator with the constructor's initial_accumulator_value, not the group's.
    defaults = {k: v for k, v in groups[0].items() if k != "params"}
    opt = make_optimizer(case["optimizer"], groups, **defaults)
    history = []
    for step_grads in case["grads"]:
        for p, g in zip(params, step_grads):
            p.grad = None if g is None else make_tensor(list(p.shape), g, dtype)
        opt.step()
        history.append([flat(p) for p in params])
    return {"name": case["name"], "params": history}


def group_momentum(group):
    if "betas" in group:
        return group["betas"][0]
    return group.get("momentum", 0.0)


def run_scheduler(case):
    groups = []
    for options in case["group_options"]:
        options = dict(options)
        if "betas" in options:
            options["betas"] = tuple(options["betas"])
        groups.append(dict(params=[torch.zeros(1, requires_grad=True)], **options))
    opt = make_optimizer(case["optimizer"], groups)
    cls = getattr(torch.optim.lr_scheduler, case["scheduler"])
    sched = cls(opt, **case["args"])
    lrs = [[g["lr"] for g in opt.param_groups]]
    momenta = [[group_momentum(g) for g in opt.param_groups]]
    metrics = case.get("metrics")
    for i in range(case["steps"]):
        opt.step()  # no gradients: only keeps the call order PyTorch expects
        if metrics is not None:
            sched.step(metrics[i])
        else:
            sched.step()
        lrs.append([g["lr"] for g in opt.param_groups])
        momenta.append([group_momentum(g) for g in opt.param_groups])
    return {"name": case["name"], "lrs": lrs, "momenta": momenta}


def run_clip(case):
    dtype = DTYPES[case["dtype"]]
    params = []
    for g in case["grads"]:
        if g is None:
            params.append(torch.zeros(2, dtype=dtype, requires_grad=True))
        else:
            p = torch.zeros(g["shape"], dtype=dtype, requires_grad=True)
            p.grad = make_tensor(g["shape"], g["values"], dtype)
            params.append(p)
    total = None
    if case["mode"] == "norm":
        args = dict(case["args"])
        if args.get("norm_type") == "inf":
            args["norm_type"] = math.inf
        total = encode([torch.nn.utils.clip_grad_norm_(params, **args).item()])[0]
    else:
        torch.nn.utils.clip_grad_value_(params, **case["args"])
    grads = [None if g is None else flat(p.grad) for p, g in zip(params, case["grads"])]
    return {"name": case["name"], "total_norm": total, "grads": grads}


RUNNERS = {"optimizer": run_optimizer, "scheduler": run_scheduler, "clip": run_clip}


def main(argv):
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    warnings.simplefilter("ignore")
    torch.set_num_threads(1)
    with open(argv[1]) as f:
        cases = json.load(f)["cases"]
    results = [RUNNERS[c["kind"]](c) for c in cases]
    with open(argv[2], "w") as f:
        json.dump({"torch_version": torch.__version__, "cases": results}, f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
