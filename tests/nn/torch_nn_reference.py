"""PyTorch reference for kiln's attention and transformer layers (live parity tests).

  torch_nn_reference.py IN.json OUT.json

IN holds {"cases": [...]}; each case builds a torch module ("module": "mha", "encoder_layer" or
"encoder" with its constructor arguments in "config"), loads the case's "state" with
load_state_dict(strict=True) (so every kiln name must be torch's), puts the module in eval mode,
runs it on "inputs" with gradients enabled (PyTorch's fast paths only run without gradients, so
this is the path kiln reproduces) and back-propagates "grad_outputs". OUT holds, per case, the
outputs, the gradients of every floating input and of every parameter, and the state_dict the
torch module had right after construction (torch's own initialization, seeded by "seed"), for
the tests that load a torch-made state dict into kiln.

Tensors are {"shape": [...], "dtype": "float32" | "float64" | "bool", "values": [...]} with
"nan", "inf" and "-inf" spelled as strings. Run with Debian's /usr/bin/python3 (python3-torch).
"""
import json
import math
import sys

import torch

DTYPES = {"float32": torch.float32, "float64": torch.float64, "bool": torch.bool}


def decode(j):
    if j is None:
        return None
    dtype = DTYPES[j["dtype"]]
    if dtype == torch.bool:
        t = torch.tensor([bool(v) for v in j["values"]], dtype=torch.bool)
    else:
        t = torch.tensor([float(v) if isinstance(v, str) else v for v in j["values"]],
                         dtype=dtype)
    return t.reshape(j["shape"])


def encode(t):
    if t is None:
        return None
    t = t.detach()
    values = []
    for v in t.double().flatten().tolist():
        if math.isnan(v):
            values.append("nan")
        elif math.isinf(v):
            values.append("inf" if v > 0 else "-inf")
        else:
            values.append(v)
    return {"shape": list(t.shape), "dtype": str(t.dtype).replace("torch.", ""),
            "values": values}


def make_layer(c, dtype):
    return torch.nn.TransformerEncoderLayer(
        c["d_model"], c["nhead"], dim_feedforward=c["dim_feedforward"], dropout=c["dropout"],
        activation=c["activation"], layer_norm_eps=c["layer_norm_eps"],
        batch_first=c["batch_first"], norm_first=c["norm_first"], dtype=dtype)


def make_module(case):
    c = case["config"]
    dtype = DTYPES[case["dtype"]]
    if case["module"] == "mha":
        return torch.nn.MultiheadAttention(
            c["embed_dim"], c["num_heads"], dropout=0.0, bias=c["bias"],
            batch_first=c["batch_first"], kdim=c.get("kdim"), vdim=c.get("vdim"), dtype=dtype)
    if case["module"] == "encoder_layer":
        return make_layer(c, dtype)
    if case["module"] == "encoder":
        norm = torch.nn.LayerNorm(c["d_model"], dtype=dtype) if c["final_norm"] else None
        return torch.nn.TransformerEncoder(make_layer(c, dtype), c["num_layers"], norm=norm)
    raise ValueError(f"unknown module {case['module']}")


def causal_mask(length, source):
    return torch.ones(length, source, dtype=torch.bool).triu(1)


def run(case):
    torch.manual_seed(case.get("seed", 0))
    module = make_module(case)
    initial = {k: encode(v) for k, v in module.state_dict().items()}
    if case.get("state") is not None:
        module.load_state_dict({k: decode(v) for k, v in case["state"].items()}, strict=True)
    module.eval()
    inputs = {k: decode(v) for k, v in case["inputs"].items()}
    for t in inputs.values():
        if t.dtype.is_floating_point:
            t.requires_grad_(True)
    opts = case.get("options", {})
    if case["module"] == "mha":
        # key/value may be the query itself (self-attention), as in PyTorch code.
        q = inputs["query"]
        k = inputs.get("key", q)
        v = inputs.get("value", k)
        mask = inputs.get("attn_mask")
        if opts.get("is_causal"):  # PyTorch 1.13 has no is_causal: spell the mask out
            L, S = (q.shape[-2], k.shape[-2]) if q.dim() == 2 else (
                (q.shape[1], k.shape[1]) if case["config"]["batch_first"] else
                (q.shape[0], k.shape[0]))
            mask = causal_mask(L, S) if mask is None else mask | causal_mask(L, S)
        kpm = inputs.get("key_padding_mask")
        if kpm is not None and kpm.is_floating_point() and mask is not None:
            # PyTorch 1.13 cannot combine a float key_padding_mask with attn_mask; PyTorch 2
            # adds them, which is kiln's rule: fold the padding mask into a 3-D attn_mask.
            n, s = (1, kpm.shape[0]) if kpm.dim() == 1 else kpm.shape
            heads = case["config"]["num_heads"]
            pad = kpm.reshape(n, 1, 1, s).expand(n, heads, 1, s).reshape(n * heads, 1, s)
            mask = (mask if mask.dim() == 3 else mask.unsqueeze(0)) + pad
            kpm = None
        out, weights = module(q, k, v, key_padding_mask=kpm,
                              need_weights=opts.get("need_weights", True), attn_mask=mask,
                              average_attn_weights=opts.get("average_attn_weights", True))
        outputs = {"output": out, "weights": weights}
    else:
        src = inputs["src"]
        mask = inputs.get("src_mask")
        if opts.get("is_causal"):
            S = src.shape[1] if case["config"]["batch_first"] and src.dim() == 3 else src.shape[0]
            mask = causal_mask(S, S) if mask is None else mask | causal_mask(S, S)
        kw = {"src_key_padding_mask": inputs.get("src_key_padding_mask")}
        if case["module"] == "encoder":
            outputs = {"output": module(src, mask=mask, **kw)}
        else:
            outputs = {"output": module(src, src_mask=mask, **kw)}
    tensors, grads = [], []
    for name, g in case["grad_outputs"].items():
        tensors.append(outputs[name])
        grads.append(decode(g))
    torch.autograd.backward(tensors, grads)
    return {
        "name": case["name"],
        "outputs": {k: encode(v) for k, v in outputs.items()},
        "input_grads": {k: encode(t.grad) for k, t in inputs.items() if t.dtype.is_floating_point},
        "param_grads": {k: encode(p.grad) for k, p in module.named_parameters()},
        "initial_state": initial,
        "initial_keys": list(initial),  # JSON readers may not keep the object's order
    }


def main():
    if len(sys.argv) != 3:
        print(__doc__)
        return 2
    with open(sys.argv[1]) as f:
        cases = json.load(f)["cases"]
    results = [run(c) for c in cases]
    with open(sys.argv[2], "w") as f:
        json.dump({"cases": results}, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
