"""PyTorch's GradScaler on planted overflows (live parity test, tests/optim/test_grad_scaler.cpp).

  torch_grad_scaler_reference.py IN.json OUT.json

PyTorch 1.13's torch.cuda.amp.GradScaler needs CUDA for two kernels only:
_amp_foreach_non_finite_check_and_unscale_ and _amp_update_scale_. This script runs the class's
own Python code (scale, unscale_, step, update, state_dict) on the CPU, with those two kernels
written out in Python as their CUDA sources define them (ATen/native/cuda/AmpKernels.cu), so the
orchestration compared is PyTorch's, not a re-implementation of it. Three CUDA-only asserts are
bypassed: the availability check, scale()'s outputs.is_cuda and _MultiDeviceReplicator's.

Each case: "params" (float32 values), "grads" (one list per step, the gradient of the loss
sum(params * g) before scaling; "inf"/"-inf"/"nan" allowed), "lr" (SGD), "options" (init_scale,
growth_factor, backoff_factor, growth_interval). OUT per case and step: the scale and growth
tracker after update(), whether the optimizer stepped, and the parameters.
"""
import json
import math
import sys

import torch
import torch.cuda.amp.grad_scaler as torch_grad_scaler
from torch.cuda.amp import GradScaler


def non_finite_check_and_unscale_(grads, found_inf, inv_scale):
    # AmpKernels.cu: every element is multiplied by inv_scale; found_inf is set to 1.0 when any
    # element is not finite.
    for g in grads:
        if not torch.isfinite(g).all():
            found_inf.fill_(1.0)
        g.mul_(inv_scale)


def update_scale_(current_scale, growth_tracker, found_inf, growth_factor, backoff_factor,
                  growth_interval):
    # AmpKernels.cu: _amp_update_scale_cuda_kernel
    if found_inf.item():
        current_scale.mul_(backoff_factor)
        growth_tracker.fill_(0)
    else:
        successful = growth_tracker.item() + 1
        if successful == growth_interval:
            new_scale = torch.tensor(current_scale.item() * growth_factor,
                                     dtype=torch.float32).item()
            if math.isfinite(new_scale):
                current_scale.fill_(new_scale)
            growth_tracker.fill_(0)
        else:
            growth_tracker.fill_(successful)
    return current_scale


torch._amp_foreach_non_finite_check_and_unscale_ = non_finite_check_and_unscale_
torch._amp_update_scale_ = update_scale_
torch_grad_scaler.amp_definitely_not_available = lambda: False  # the class's own CUDA check


class CpuReplicator(torch_grad_scaler._MultiDeviceReplicator):
    def __init__(self, master_tensor):  # the original asserts master_tensor.is_cuda
        self.master = master_tensor
        self._per_device_tensors = {}


torch_grad_scaler._MultiDeviceReplicator = CpuReplicator


class CpuGradScaler(GradScaler):
    def scale(self, outputs):  # the CUDA version asserts outputs.is_cuda; the same arithmetic
        if self._scale is None:
            self._lazy_init_scale_growth_tracker(outputs.device)
        return outputs * self._scale.to(device=outputs.device)


def value(v):
    return float(v) if isinstance(v, str) else v


def main():
    cases = json.load(open(sys.argv[1]))["cases"]
    out = []
    for case in cases:
        p = torch.tensor(case["params"], dtype=torch.float32, requires_grad=True)
        opt = torch.optim.SGD([p], lr=case["lr"])
        scaler = CpuGradScaler(**case["options"])
        steps = []
        for g in case["grads"]:
            g = torch.tensor([value(v) for v in g], dtype=torch.float32)
            opt.zero_grad()
            scaler.scale((p * g).sum()).backward()
            scaler.step(opt)
            stepped = sum(v.item() for v in scaler._found_inf_per_device(opt).values()) == 0
            scaler.update()
            steps.append({"scale": scaler.get_scale(),
                          "growth_tracker": int(scaler._get_growth_tracker()),
                          "stepped": stepped,
                          "params": p.detach().tolist()})
        out.append({"steps": steps, "state_dict": scaler.state_dict()})
    json.dump({"cases": out}, open(sys.argv[2], "w"))


if __name__ == "__main__":
    main()
