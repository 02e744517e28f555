#!/usr/bin/python3
"""PyTorch's DataLoader on the workload of bench/bench_loader.cpp: samples/s over full epochs.

Run with Debian's interpreter (/usr/bin/python3, which has python3-torch):

  /usr/bin/python3 bench/torch_loader.py [--workers 2] [--epochs 3] [--batch 128]
                                         [--data /usr/share/datasets/fashion-mnist]

Fashion-MNIST train (60000 images) read with gzip + numpy into a uint8 tensor [N, 1, 28, 28]
(not timed); a torch.utils.data.Dataset applies, per sample, torchvision's ToTensor,
RandomCrop(28, padding=4), RandomHorizontalFlip() and Normalize((0.2860,), (0.3530,)) — from
torchvision.transforms when python3-torchvision is installed, otherwise the same operations
written with torch ops exactly as torchvision 0.14 implements them for tensors; then
DataLoader(batch_size=128, shuffle=True, num_workers=W). Every batch is touched (its sum goes
into a checksum). Prints one JSON object; the figure is the median over the epochs of
samples / epoch wall time (each epoch includes starting the workers, as it does in training
with the default persistent_workers=False).
"""
import argparse
import gzip
import json
import os
import resource
import statistics
import struct
import time

import numpy as np
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

MEAN, STD = 0.2860, 0.3530

try:
    import torchvision.transforms as T

    HAVE_TORCHVISION = True
except ImportError:
    HAVE_TORCHVISION = False


def read_idx_gz(path, magic, dims):
    with gzip.open(path, "rb") as f:
        data = f.read()
    got, *shape = struct.unpack(">" + "I" * (1 + dims), data[:4 * (1 + dims)])
    if got != magic:
        raise ValueError(f"{path}: magic {got:#x}, expected {magic:#x}")
    return np.frombuffer(data, dtype=np.uint8, offset=4 * (1 + dims)).reshape(shape)


class Augment:
    """torchvision's tensor code paths for the four transforms (torchvision 0.14)."""

    def __init__(self, size=28, padding=4, p=0.5, mean=(MEAN,), std=(STD,)):
        self.size, self.padding, self.p = size, padding, p
        self.mean = torch.as_tensor(mean, dtype=torch.float32).view(-1, 1, 1)
        self.std = torch.as_tensor(std, dtype=torch.float32).view(-1, 1, 1)

    def __call__(self, img):
        # ToTensor on uint8: to the default float dtype, divided by 255.
        x = img.to(dtype=torch.get_default_dtype()).div(255)
        # RandomCrop: F.pad (constant 0) on every side, then offsets from torch.randint.
        x = F.pad(x, [self.padding] * 4)
        h, w = x.shape[-2:]
        i = torch.randint(0, h - self.size + 1, size=(1,)).item()
        j = torch.randint(0, w - self.size + 1, size=(1,)).item()
        x = x[..., i:i + self.size, j:j + self.size]
        # RandomHorizontalFlip.
        if torch.rand(1) < self.p:
            x = x.flip(-1)
        # Normalize (inplace=False clones first).
        x = x.clone()
        return x.sub_(self.mean).div_(self.std)


def torchvision_augment():
    # ToTensor needs a PIL image or ndarray; the dataset holds tensors, so convert as it does.
    return T.Compose([T.ConvertImageDtype(torch.float32), T.RandomCrop(28, padding=4),
                      T.RandomHorizontalFlip(), T.Normalize((MEAN,), (STD,))])


class AugmentedFashionMnist(Dataset):
    def __init__(self, images, labels, transform):
        self.images, self.labels, self.transform = images, labels, transform

    def __len__(self):
        return self.images.shape[0]

    def __getitem__(self, index):
        return self.transform(self.images[index]), self.labels[index]


def cpu_seconds():
    """CPU seconds of this process and of its reaped children (the workers of ended epochs)."""
    total = 0.0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        u = resource.getrusage(who)
        total += u.ru_utime + u.ru_stime
    return total


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    args = parser.parse_args()

    images = read_idx_gz(os.path.join(args.data, "train-images-idx3-ubyte.gz"), 0x803, 3)
    labels = read_idx_gz(os.path.join(args.data, "train-labels-idx1-ubyte.gz"), 0x801, 1)
    n = images.shape[0]
    images = torch.from_numpy(images.copy()).reshape(n, 1, 28, 28)
    labels = torch.from_numpy(labels.astype(np.int64))
    transform = torchvision_augment() if HAVE_TORCHVISION else Augment()
    dataset = AugmentedFashionMnist(images, labels, transform)
    loader = DataLoader(dataset, batch_size=args.batch, shuffle=True, num_workers=args.workers)

    load_before = " ".join(open("/proc/loadavg").read().split()[:3])
    epoch_s, epoch_cpu_s, checksum, samples = [], [], 0.0, 0
    for _ in range(args.epochs):
        samples = 0
        t0, cpu0 = time.perf_counter(), cpu_seconds()
        for x, y in loader:
            checksum += x.sum().item() + y.sum().item()
            samples += x.shape[0]
        epoch_s.append(time.perf_counter() - t0)
        del x, y  # drop the last batch's shared memory before the workers' CPU time is read
        epoch_cpu_s.append(cpu_seconds() - cpu0)
    load_after = " ".join(open("/proc/loadavg").read().split()[:3])
    med = statistics.median(epoch_s)
    print(json.dumps({
        "framework": "pytorch " + torch.__version__,
        "transforms": "torchvision" if HAVE_TORCHVISION else "torch ops (torchvision's code)",
        "workers": args.workers, "batch_size": args.batch,
        "torch_threads": torch.get_num_threads(), "samples_per_epoch": samples,
        "epoch_seconds": [round(s, 4) for s in epoch_s], "median_epoch_seconds": round(med, 4),
        "median_epoch_cpu_seconds": round(statistics.median(epoch_cpu_s), 4),
        "samples_per_second": round(samples / med, 1), "checksum": checksum,
        "loadavg_before": load_before, "loadavg_after": load_after,
    }, indent=2))


if __name__ == "__main__":
    main()
