#!/usr/bin/python3
"""PyTorch's side of the head-to-head harness (bench/h2h/run.sh): eager, and TorchScript for
ResNet-18 inference (@torchscript results).

Run with Debian's interpreter (/usr/bin/python3, which has python3-torch and python3-onnx).

  torch_h2h.py prepare --dir DIR
      Builds the CIFAR ResNet-18 (kuangliu/pytorch-cifar, kiln's parameter names), seeded, with
      batch-norm statistics from a few batches, and writes DIR/weights.safetensors (for kiln),
      DIR/resnet18.onnx (eval mode, dynamic batch, for ONNX Runtime) and DIR/inputs.safetensors
      (x64: 64 images, logits64: PyTorch's eval-mode logits for them, the correctness reference).
  torch_h2h.py bench --group micro|train|infer|compile|cnn [--quick] [--threads 2] [--dir DIR]
                     [--data /usr/share/datasets/fashion-mnist]
      The twins of kiln_h2h's workloads under the same names; prints one JSON object on stdout
      in kiln_h2h's format.

Timing is the algorithm of h2h_common.h: warm-up calls, then repetitions of a calibrated number
of calls (each repetition lasting at least min_time), median and minimum per call.
"""
import argparse
import gzip
import json
import os
import resource
import statistics
import struct
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

FMNIST = "/usr/share/datasets/fashion-mnist"


# --- models, with kiln's parameter names (kiln/nn/models.h) ----------------------------------

class BasicBlock(nn.Module):
    def __init__(self, in_planes, planes, stride=1):
        super().__init__()
        self.conv1 = nn.Conv2d(in_planes, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.shortcut = nn.Sequential()
        if stride != 1 or in_planes != planes:
            self.shortcut = nn.Sequential(nn.Conv2d(in_planes, planes, 1, stride, bias=False),
                                          nn.BatchNorm2d(planes))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.shortcut(x))


class ResNet(nn.Module):
    def __init__(self, blocks=(2, 2, 2, 2), in_channels=3, classes=10):
        super().__init__()
        self.in_planes = 64
        self.conv1 = nn.Conv2d(in_channels, 64, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.layer1 = self._stage(64, blocks[0], 1)
        self.layer2 = self._stage(128, blocks[1], 2)
        self.layer3 = self._stage(256, blocks[2], 2)
        self.layer4 = self._stage(512, blocks[3], 2)
        self.linear = nn.Linear(512, classes)

    def _stage(self, planes, blocks, stride):
        layers = []
        for i in range(blocks):
            layers.append(BasicBlock(self.in_planes, planes, stride if i == 0 else 1))
            self.in_planes = planes
        return nn.Sequential(*layers)

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.layer4(self.layer3(self.layer2(self.layer1(out))))
        out = torch.flatten(F.adaptive_avg_pool2d(out, 1), 1)
        return self.linear(out)


class SmallCnn(nn.Module):
    def __init__(self, in_channels=1, classes=10, image_size=28):
        super().__init__()
        side = image_size // 4
        self.conv1 = nn.Conv2d(in_channels, 32, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(32)
        self.conv2 = nn.Conv2d(32, 64, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(64)
        self.fc1 = nn.Linear(64 * side * side, 128)
        self.fc2 = nn.Linear(128, classes)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)
        x = F.max_pool2d(F.relu(self.bn2(self.conv2(x))), 2)
        x = F.relu(self.fc1(torch.flatten(x, 1)))
        return self.fc2(x)


def mlp():
    return nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 10))


# --- safetensors without the safetensors package (as tests/io/torch_interop.py) --------------

DTYPES = {torch.float32: ("F32", "<f4"), torch.int64: ("I64", "<i8")}
NUMPY = {"F32": "<f4", "I64": "<i8"}


def save_safetensors(path, tensors):
    header, chunks, offset = {}, [], 0
    for name, t in tensors.items():
        code, npt = DTYPES[t.dtype]
        raw = t.detach().contiguous().numpy().astype(npt).tobytes()
        header[name] = {"dtype": code, "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    text = json.dumps(header).encode("utf-8")
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for raw in chunks:
            f.write(raw)


def load_safetensors(path):
    data = open(path, "rb").read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n].decode("utf-8"))
    header.pop("__metadata__", None)
    buf = data[8 + n:]
    out = {}
    for name, info in header.items():
        b, e = info["data_offsets"]
        arr = np.frombuffer(buf[b:e], dtype=NUMPY[info["dtype"]]).copy()
        out[name] = torch.from_numpy(arr).reshape(info["shape"])
    return out


# --- timing (the algorithm of h2h_common.h) ----------------------------------------------------

def run_for(fn, iters):
    start = time.perf_counter()
    for _ in range(iters):
        fn()
    return time.perf_counter() - start


def time_workload(fn, warmup, reps, min_time=0.0):
    last = 0.0
    for _ in range(warmup):
        last = run_for(fn, 1)
    inner = 1
    if min_time > 0 and last < min_time:
        while True:
            elapsed = run_for(fn, inner)
            if elapsed >= min_time:
                break
            inner = max(inner + 1, int(inner * min(10.0, 1.4 * min_time / max(elapsed, 1e-9))))
    per_call, cpu = [], []
    for _ in range(reps):
        cpu0 = time.process_time()
        per_call.append(run_for(fn, inner) / inner)
        cpu.append((time.process_time() - cpu0) / inner)
    return {"median_s": statistics.median(per_call), "min_s": min(per_call), "reps": reps,
            "inner": inner, "samples_s": per_call, "cpu_median_s": statistics.median(cpu)}


def log(msg):
    print(f"torch_h2h: {msg}", file=sys.stderr, flush=True)


def proc_status_mib(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024.0
    return -1.0


def loaded_blas():
    """The BLAS library this process mapped (PyTorch's matmul goes to libblas.so.3): OpenBLAS's
    own library when present, else the libblas it resolved to."""
    with open("/proc/self/maps") as f:
        libs = {os.path.realpath(line.split()[-1]) for line in f if "blas" in line.split()[-1]}
    named = sorted(p for p in libs if "openblas" in os.path.basename(p)) or sorted(libs)
    return named[0] if named else "none loaded"


def loadavg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


# --- groups ------------------------------------------------------------------------------------

def group_micro(a):
    res = {}
    small = dict(warmup=100, reps=5 if a.quick else 9, min_time=0.05 if a.quick else 0.2)
    dense = dict(warmup=2, reps=3 if a.quick else 7, min_time=0.05 if a.quick else 0.2)
    x, y = torch.rand(1), torch.rand(1)
    res["dispatch_add"] = time_workload(lambda: torch.add(x, y), **small)
    log("dispatch_add done")
    a1, b1 = torch.rand(1024, 1024), torch.rand(1024, 1024)
    res["sgemm_1024"] = time_workload(lambda: torch.mm(a1, b1), **dense)
    log("sgemm done")
    info = {"blas": loaded_blas()}
    x = torch.randn(64, 64, 32, 32)
    w = torch.randn(64, 64, 3, 3) * 0.05
    gy = torch.randn(64, 64, 32, 32)
    # aten::convolution_backward is the kernel autograd runs for conv2d's backward; the output
    # mask asks for one gradient at a time.
    conv_bwd = torch.ops.aten.convolution_backward
    args = (None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1)
    res["conv_fwd"] = time_workload(lambda: F.conv2d(x, w, None, 1, 1), **dense)
    res["conv_bwd_data"] = time_workload(
        lambda: conv_bwd(gy, x, w, *args, [True, False, False]), **dense)
    res["conv_bwd_weight"] = time_workload(
        lambda: conv_bwd(gy, x, w, *args, [False, True, False]), **dense)
    log("conv done")
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    xb, yb = torch.rand(64, 1, 28, 28), torch.randint(0, 10, (64,))

    def mlp_step():
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(xb), yb)
        loss.backward()
        opt.step()

    res["mlp_step"] = time_workload(mlp_step, warmup=5, reps=5 if a.quick else 9,
                                    min_time=0.05 if a.quick else 0.2)
    log("mlp_step done")
    return res, info


def resnet_train_step(bf16=False):
    """The ResNet-18 training workload (batch 128, Adam 1e-3): a step function and a list whose
    element 0 is the last step's loss. bf16: the forward and loss under CPU autocast."""
    model = ResNet()
    model.train()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x, y = torch.randn(128, 3, 32, 32), torch.randint(0, 10, (128,))
    last = [0.0]

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        last[0] = loss.item()

    return step, last


def group_train(a):
    baseline = proc_status_mib("VmRSS")
    step, last = resnet_train_step()
    warmup, reps = 1, 3 if a.quick else 5
    res = {"resnet18_train_step": time_workload(step, warmup, reps)}
    log("resnet18_train_step done")
    info = {"rss_peak_mib": proc_status_mib("VmHWM"), "rss_baseline_mib": baseline,
            "ru_maxrss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
            "steps": warmup + reps, "last_loss": last[0]}
    return res, info


def group_lowp(a):
    """Reduced precision, the twin of kiln_h2h --group=lowp: matmul in float32 and bfloat16, the
    3x3 convolution's passes in bfloat16, the ResNet-18 step in float32 and under
    torch.autocast("cpu", dtype=torch.bfloat16)."""
    res = {}
    dense = dict(warmup=2, reps=3 if a.quick else 7, min_time=0.05 if a.quick else 0.2)
    for dt, name in ((torch.float32, "lp_sgemm"), (torch.bfloat16, "lp_bf16gemm")):
        for n in (1024,) if a.quick else (1024, 2048):
            a1, b1 = torch.rand(n, n).to(dt), torch.rand(n, n).to(dt)
            res[f"{name}_{n}"] = time_workload(lambda: torch.mm(a1, b1), **dense)
    log("gemm done")
    conv_bwd = torch.ops.aten.convolution_backward
    args = (None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1)
    x = torch.randn(64, 64, 32, 32).bfloat16()
    w = (torch.randn(64, 64, 3, 3) * 0.05).bfloat16()
    gy = torch.randn(64, 64, 32, 32).bfloat16()
    res["lp_conv_fwd_bf16"] = time_workload(lambda: F.conv2d(x, w, None, 1, 1), **dense)
    res["lp_conv_bwd_data_bf16"] = time_workload(
        lambda: conv_bwd(gy, x, w, *args, [True, False, False]), **dense)
    res["lp_conv_bwd_weight_bf16"] = time_workload(
        lambda: conv_bwd(gy, x, w, *args, [False, True, False]), **dense)
    log("conv done")
    info = {}
    for low in (False, True):
        torch.manual_seed(0)
        step, last = resnet_train_step(bf16=low)
        name = "lp_resnet18_train_step_" + ("bf16" if low else "f32")
        res[name] = time_workload(step, 1, 2 if a.quick else 5)
        info[name + "_last_loss"] = last[0]
        log(name + " done")
    return res, info


def group_infer(a):
    model = ResNet()
    sd = load_safetensors(os.path.join(a.dir, "weights.safetensors"))
    model.load_state_dict(sd)
    model.eval()
    inputs = load_safetensors(os.path.join(a.dir, "inputs.safetensors"))
    x64 = inputs["x64"]
    x1 = x64[:1].contiguous()
    res = {}
    with torch.no_grad():
        err = (model(x64) - inputs["logits64"]).abs().max() / inputs["logits64"].abs().max()
        res["resnet18_infer_b1"] = time_workload(
            lambda: model(x1), warmup=3, reps=5 if a.quick else 9,
            min_time=0.05 if a.quick else 0.2)
        log("resnet18_infer_b1 done")
        res["resnet18_infer_b64"] = time_workload(lambda: model(x64), warmup=1,
                                                  reps=3 if a.quick else 7)
        log("resnet18_infer_b64 done")
        # TorchScript, the graph users deploy: traced at each size, frozen, optimized.
        ts1, ts64 = torchscript(model, x1), torchscript(model, x64)
        ts_err = (ts64(x64) - inputs["logits64"]).abs().max() / inputs["logits64"].abs().max()
        res["resnet18_infer_b1@torchscript"] = time_workload(
            lambda: ts1(x1), warmup=3, reps=5 if a.quick else 9,
            min_time=0.05 if a.quick else 0.2)
        res["resnet18_infer_b64@torchscript"] = time_workload(lambda: ts64(x64), warmup=1,
                                                              reps=3 if a.quick else 7)
        log("resnet18 TorchScript done")
    return res, {"logits_max_rel_err": float(err), "torchscript_logits_max_rel_err": float(ts_err)}


def torchscript(model, example):
    """torch.jit.trace + torch.jit.freeze + torch.jit.optimize_for_inference: the TorchScript
    path PyTorch documents for deploying an inference model (shapes specialized to `example`)."""
    traced = torch.jit.trace(model, example)
    return torch.jit.optimize_for_inference(torch.jit.freeze(traced.eval()))


def group_compile(a):
    """Compile time and latency by batch size: a TorchScript graph traced per size (trace,
    freeze, optimize_for_inference and the first call, which runs TorchScript's profiling
    executor), then its latency."""
    model = ResNet()
    model.load_state_dict(load_safetensors(os.path.join(a.dir, "weights.safetensors")))
    model.eval()
    res, info = {}, {}
    with torch.no_grad():
        for b in (1, 8, 32, 64, 128):
            x = torch.randn(b, 3, 32, 32)
            t0 = time.perf_counter()
            ts = torchscript(model, x)
            ts(x)
            info[f"compile_s_b{b}"] = time.perf_counter() - t0
            res[f"resnet18_latency_b{b}@torchscript"] = time_workload(
                lambda: ts(x), warmup=1, reps=3 if a.quick else 5,
                min_time=0.05 if a.quick else 0.2)
            log(f"batch {b} done")
    return res, info


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    ndim = data[3]
    dims = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def group_cnn(a):
    images = torch.from_numpy(read_idx(os.path.join(a.data, "train-images-idx3-ubyte.gz"))
                              .astype(np.float32) / 255.0).reshape(-1, 1, 28, 28)
    labels = torch.from_numpy(read_idx(os.path.join(a.data, "train-labels-idx1-ubyte.gz"))
                              .astype(np.int64))
    n, batch = images.shape[0], 128
    model = SmallCnn()
    model.train()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    state = {"order": None, "pos": n, "loss_sum": 0.0, "count": 0}

    def step():
        if state["pos"] >= n:
            state["order"] = torch.randperm(n)
            state["pos"] = 0
        idx = state["order"][state["pos"]:state["pos"] + batch]
        state["pos"] += idx.numel()
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(images.index_select(0, idx)), labels.index_select(0, idx))
        loss.backward()
        opt.step()
        state["loss_sum"] += loss.item()
        state["count"] += 1

    warmup_steps = 5
    if a.quick:
        steps = 50
        t = time_workload(step, warmup_steps, steps)
        scale = n / batch
        t["step_median_s"] = t["median_s"]
        t["median_s"] *= scale
        t["min_s"] *= scale
        t["cpu_median_s"] *= scale
        t["extrapolated_from_steps"] = steps
    else:
        for _ in range(warmup_steps):
            step()

        def epoch():
            state.update(pos=n, loss_sum=0.0, count=0)
            while True:
                step()
                if state["pos"] >= n:
                    break

        t = time_workload(epoch, 0, 3)
    log("cnn_epoch done")
    return {"cnn_epoch": t}, {
        "mean_loss_last_epoch_or_steps": state["loss_sum"] / max(state["count"], 1)}


# --- prepare -----------------------------------------------------------------------------------

def prepare(a):
    import onnx  # python3-onnx: only to validate the export

    os.makedirs(a.dir, exist_ok=True)
    torch.manual_seed(0)
    model = ResNet()
    # Batch-norm statistics from a few batches (cumulative average), so that eval mode sees
    # realistic, well-scaled running statistics instead of the initial zeros and ones.
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.momentum = None
            m.weight.data.uniform_(0.5, 1.5)
            m.bias.data.uniform_(-0.1, 0.1)
    model.train()
    with torch.no_grad():
        for _ in range(4):
            model(torch.randn(32, 3, 32, 32))
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.momentum = 0.1
    model.eval()
    save_safetensors(os.path.join(a.dir, "weights.safetensors"), model.state_dict())
    x64 = torch.randn(64, 3, 32, 32)
    with torch.no_grad():
        logits = model(x64)
    save_safetensors(os.path.join(a.dir, "inputs.safetensors"),
                     {"x64": x64, "logits64": logits})
    path = os.path.join(a.dir, "resnet18.onnx")
    torch.onnx.export(model, x64[:1], path, input_names=["input"], output_names=["logits"],
                      dynamic_axes={"input": {0: "batch"}, "logits": {0: "batch"}},
                      opset_version=13, do_constant_folding=True)
    onnx.checker.check_model(onnx.load(path))
    info = {"parameters": sum(p.numel() for p in model.parameters()), "onnx": path,
            "opset": 13, "onnx_version": onnx.__version__}
    json.dump(info, sys.stdout)
    print()
    log(f"prepared {a.dir}: {info['parameters']} parameters, ONNX opset 13")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("command", choices=["prepare", "bench"])
    p.add_argument("--group", choices=["micro", "train", "infer", "compile", "cnn", "lowp"])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--dir", default="")
    p.add_argument("--data", default=FMNIST)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.set_num_interop_threads(1)
    if a.command == "prepare":
        prepare(a)
        return
    if a.group is None:
        p.error("bench needs --group")
    torch.manual_seed(0)
    before = loadavg()
    res, info = {"micro": group_micro, "train": group_train, "infer": group_infer,
                 "compile": group_compile, "cnn": group_cnn, "lowp": group_lowp}[a.group](a)
    out = {"side": "torch", "group": a.group, "quick": a.quick,
           "threads": torch.get_num_threads(), "version": torch.__version__,
           "loadavg_before": before, "loadavg_after": loadavg(), "results": res, "info": info}
    json.dump(out, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
