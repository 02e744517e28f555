"""Shrinks a failing fuzz program, and writes programs as kiln C++ and PyTorch repros.

Shrinking is greedy: drop a step (and every later step that reads what it made), drop unused
inputs, then simplify each input (contiguous layout, no requires_grad, the sample's own shape,
float32), keeping a change only while the program still fails the same way. Value numbers
follow Note [fuzz programs]: inputs first, then each call step's outputs (counted from the
catalog).
"""


def _refs(step):
    return list(step.get("args", [])) + [step[k] for k in ("target", "other") if k in step]


def _renumber(step, f):
    s = dict(step)
    if "args" in s:
        s["args"] = [f(a) for a in s["args"]]
    for key in ("target", "other"):
        if key in s:
            s[key] = f(s[key])
    return s


def drop_step(program, k, n_outputs):
    """The program without step k and the steps that (transitively) read its outputs."""
    n_in = len(program["inputs"])
    removed, renumber = set(), {i: i for i in range(n_in)}
    old_next = new_next = n_in
    steps = []
    for idx, step in enumerate(program["steps"]):
        made = list(range(old_next, old_next + n_outputs(step)))
        old_next += len(made)
        if idx == k or any(r in removed for r in _refs(step)):
            removed.update(made)
            continue
        steps.append(_renumber(step, lambda v: renumber[v]))
        for v in made:
            renumber[v] = new_next
            new_next += 1
    if not steps:
        return None
    return drop_unused_inputs(dict(program, steps=steps))


def drop_unused_inputs(program):
    n_in = len(program["inputs"])
    used = {r for step in program["steps"] for r in _refs(step) if r < n_in}
    keep = [i for i in range(n_in) if i in used]
    if len(keep) == n_in:
        return program
    shift = {old: new for new, old in enumerate(keep)}
    gone = n_in - len(keep)
    steps = [_renumber(s, lambda v: shift[v] if v < n_in else v - gone)
             for s in program["steps"]]
    return dict(program, inputs=[program["inputs"][i] for i in keep], steps=steps)


def input_simplifications(program, catalog_by_id):
    for i, spec in enumerate(program["inputs"]):
        sample_shape = catalog_by_id[spec["sample"]]["inputs"][spec["arg"]]["shape"]
        for key, value in (("layout", "contiguous"), ("requires_grad", False),
                           ("shape", sample_shape), ("dtype", "float32")):
            if key == "dtype" and spec["dtype"] != "float64":
                continue
            if spec.get(key) != value:
                inputs = list(program["inputs"])
                inputs[i] = dict(spec, **{key: value})
                yield dict(program, inputs=inputs)


def shrink(program, still_fails, catalog_by_id, budget=300):
    """The smallest program found for which still_fails(program) holds; at most `budget` runs."""
    def n_outputs(step):
        return len(catalog_by_id[step["call"]]["outputs"]) if "call" in step else 0

    runs = 0
    changed = True
    while changed and runs < budget:
        changed = False
        for k in reversed(range(len(program["steps"]))):
            if runs >= budget or k >= len(program["steps"]):
                continue
            cand = drop_step(program, k, n_outputs)
            if cand is None:
                continue
            runs += 1
            if still_fails(cand):
                program, changed = cand, True
        for cand in list(input_simplifications(program, catalog_by_id)):
            if runs >= budget:
                break
            runs += 1
            if still_fails(cand):
                program, changed = cand, True
                break  # the generator's candidates refer to the old program
    return program


def _py_float(v):
    if isinstance(v, str):
        return f"float('{v}')"
    return repr(v)


def _inplace_call(step, number):
    """`vT.method(args)` for an in-place step; `number` spells a scalar in the target language."""
    m = step["inplace"]
    if "other" in step:
        arg = f"v{step['other']}"
    elif m == "clamp_":
        arg = f"{number(step.get('min', -0.5))}, {number(step.get('max', 0.5))}"
    elif m == "zero_":
        arg = ""
    else:
        arg = number(step.get("scalar", 0.0))
    return f"v{step['target']}.{m}({arg})"


def _py_number(c):
    # kiln reads an integral C++ double as an int64 scalar (Note [C++ number operands]).
    return repr(int(c)) if float(c).is_integer() else repr(c)


def to_pytorch(program, kiln_inputs, catalog_by_id):
    """A standalone PyTorch script for the program (inputs as kiln built them)."""
    lines = ["import math", "import torch", "F = torch.nn.functional", ""]
    for i, enc in enumerate(kiln_inputs):
        vals = ", ".join(_py_float(v) for v in enc["storage"])
        dt = enc["dtype"]
        base = (f"torch.tensor([{vals}], dtype=torch.float64).to(torch.{dt})"
                if dt.startswith(("float", "bfloat")) else
                f"torch.tensor([{vals}]).to(torch.{dt})")
        rg = ".requires_grad_()" if enc["requires_grad"] else ""
        lines.append(f"v{i} = {base}.as_strided({enc['shape']}, {enc['strides']}, "
                     f"{enc['offset']}).detach(){rg}")
    n = len(kiln_inputs)
    for step in program["steps"]:
        if "inplace" in step:
            lines.append(_inplace_call(step, _py_number))
            continue
        expr = catalog_by_id[step["call"]]["torch"]
        env = ", ".join(f"a{j}=v{a}" for j, a in enumerate(step["args"]))
        outs = len(catalog_by_id[step["call"]]["outputs"])
        names = [f"v{n + j}" for j in range(outs)]
        n += outs
        call = f"(lambda {', '.join(f'a{j}' for j in range(len(step['args'])))}: {expr})({env})"
        lines.append(f"{', '.join(names)}{',' if outs == 1 else ''} = "
                     f"{'(' + call + ',)' if outs == 1 else call}  # {step['call']}")
    # The loss of Note [fuzz programs], with kiln::sample_tensor's weights (SplitMix64).
    lines += [
        "", "def weights(n, seed):", "    m, state, out = (1 << 64) - 1, (seed * 0x2545F4914F6CDD1D + 1) & ((1 << 64) - 1), []",
        "    for _ in range(n):", "        state = (state + 0x9E3779B97F4A7C15) & m", "        z = state",
        "        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & m", "        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & m",
        "        out.append(0.5 + ((z ^ (z >> 31)) >> 11) * 2.0 ** -53)", "    return out", "",
        "loss = None",
        f"for j in range({len(kiln_inputs)}, {n}):",
        "    v = globals()[f'v{j}']",
        "    if v.dtype.is_floating_point and v.requires_grad:",
        f"        w = torch.tensor(weights(v.numel(), {program.get('loss_seed', 1)} * 1000 + j), "
        "dtype=torch.float64).reshape(v.shape).to(v.dtype)",
        "        loss = (v * w).sum() if loss is None else loss + (v * w).sum()",
        "if loss is not None:", "    loss.backward()"]
    return "\n".join(lines) + "\n"


CPP_DTYPES = {"bool": "Bool", "uint8": "UInt8", "int8": "Int8", "int32": "Int32",
              "int64": "Int64", "float16": "Float16", "bfloat16": "BFloat16",
              "float32": "Float32", "float64": "Float64"}


def _cpp_float(v):
    if isinstance(v, str):
        return {"nan": "NAN", "inf": "INFINITY", "-inf": "-INFINITY"}[v]
    return repr(float(v))


def to_cpp(program, kiln_inputs, catalog_by_id):
    """The program as kiln C++ (a GoogleTest body): inputs as literal storage plus geometry, each
    call through the registry sample the fuzzer drew (its `fn` is the public-API call)."""
    lines = ["// Needs kiln/kiln.h, tests/samples/registry.h and tests/fuzz/program.h (the",
             "// registry's samples by id); link tests/fuzz/program.cpp and kiln_op_samples.",
             "kiln::fuzz::Catalog catalog;",
             "auto call = [&](const char* id, std::vector<kiln::Tensor> in) {",
             "  return catalog.sample(id).fn(in);",
             "};"]
    for i, enc in enumerate(kiln_inputs):
        vals = ", ".join(_cpp_float(v) for v in enc["storage"])
        dt = CPP_DTYPES[enc["dtype"]]
        lines.append(f"kiln::Tensor v{i} = kiln::make_view(kiln::tensor(std::vector<double>{{{vals}}})"
                     f".to(kiln::DType::{dt}), {{{', '.join(map(str, enc['shape']))}}}, "
                     f"{{{', '.join(map(str, enc['strides']))}}}, {enc['offset']}).detach();")
        if enc["requires_grad"]:
            lines.append(f"v{i}.set_requires_grad(true);")
    n = len(kiln_inputs)
    for step in program["steps"]:
        if "inplace" in step:
            lines.append(_inplace_call(step, lambda c: repr(float(c))) + ";")
            continue
        outs = len(catalog_by_id[step["call"]]["outputs"])
        args = ", ".join(f"v{a}" for a in step["args"])
        lines.append(f"auto out{n} = call(\"{step['call']}\", {{{args}}});  "
                     f"// torch: {catalog_by_id[step['call']]['torch']}")
        for j in range(outs):
            lines.append(f"kiln::Tensor v{n + j} = out{n}.at({j});")
        n += outs
    # The loss of Note [fuzz programs].
    outs = ", ".join(f"v{j}" for j in range(len(kiln_inputs), n))
    lines += [f"std::vector<kiln::Tensor> outs{{{outs}}};", "kiln::Tensor loss;",
              "for (size_t i = 0; i < outs.size(); ++i) {",
              "  const kiln::Tensor& v = outs[i];",
              "  if (!kiln::is_floating(v.dtype()) || !v.requires_grad()) continue;",
              "  kiln::Tensor w;",
              "  {",
              "    kiln::NoGradGuard no_grad;",
              f"    w = kiln::sample_tensor(v.shape(), {program.get('loss_seed', 1)} * 1000 + "
              f"{len(kiln_inputs)} + i, 0.5, 1.5).to(v.dtype());",
              "  }",
              "  kiln::Tensor term = kiln::sum(kiln::mul(v, w));",
              "  loss = loss.defined() ? kiln::add(loss, term) : term;",
              "}",
              "if (loss.defined()) loss.backward();"]
    return "\n".join(lines) + "\n"
