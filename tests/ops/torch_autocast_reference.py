"""PyTorch reference for kiln's autocast (live parity test, tests/ops/test_autocast_parity.cpp).

  torch_autocast_reference.py IN.json OUT.json

IN holds {"cases": [...]}; each case names an expression ("linear", "matmul", "bmm", "conv2d",
"conv_transpose2d", "mlp") over float32 "inputs", of which those listed in "params" require
grad. The expression runs inside torch.autocast("cpu", dtype=torch.bfloat16); the sum of its
output (in float32, outside the region) is back-propagated. OUT holds, per case, the output's
dtype and values (as float32) and the gradient of every parameter with its dtype.

Tensors are {"shape": [...], "dtype": "float32", "values": [...]}. Run with Debian's
/usr/bin/python3 (python3-torch).
"""
import json
import sys

import torch
import torch.nn.functional as F


def decode(j):
    return torch.tensor(j["values"], dtype=torch.float32).reshape(j["shape"])


def encode(t):
    return {"shape": list(t.shape), "dtype": str(t.dtype).replace("torch.", ""),
            "values": t.detach().to(torch.float32).reshape(-1).tolist()}


def run(name, a):
    if name == "linear":
        return F.linear(a[0], a[1], a[2])
    if name == "matmul":
        return torch.matmul(a[0], a[1])
    if name == "bmm":
        return torch.bmm(a[0], a[1])
    if name == "conv2d":
        return F.conv2d(a[0], a[1], a[2], padding=1)
    if name == "conv_transpose2d":
        return F.conv_transpose2d(a[0], a[1], a[2], stride=2)
    if name == "mlp":
        # x, w1, b1, w2, b2, one-hot targets: linear -> relu -> linear -> log_softmax -> NLL
        h = F.relu(F.linear(a[0], a[1], a[2]))
        logits = F.linear(h, a[3], a[4])
        return -(F.log_softmax(logits.float(), dim=1) * a[5]).sum(dim=1).mean()
    raise ValueError(f"unknown case {name}")


def main():
    cases = json.load(open(sys.argv[1]))["cases"]
    out = []
    for case in cases:
        inputs = [decode(t) for t in case["inputs"]]
        for i in case["params"]:
            inputs[i].requires_grad_(True)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = run(case["name"], inputs)
        y.float().sum().backward()
        out.append({"output": encode(y),
                    "grads": [encode(inputs[i].grad) for i in case["params"]]})
    json.dump({"cases": out}, open(sys.argv[2], "w"))


if __name__ == "__main__":
    main()
