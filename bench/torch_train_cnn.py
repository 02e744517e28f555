"""The main job in PyTorch, for comparison with `kiln train --model cnn --data fashion-mnist`:
the same small CNN (conv 32 -> BN -> ReLU -> maxpool, conv 64 -> BN -> ReLU -> maxpool, linear 128,
linear 10; PyTorch's default init), the same normalization (mean 0.2860, std 0.3530), Adam 1e-3,
batch 128, shuffled, the test split evaluated after every epoch, 2 threads.

Usage: /usr/bin/python3 bench/torch_train_cnn.py [--epochs 2] [--threads 2] [--data-dir DIR]
Prints one JSON line: seconds per epoch (training only and with evaluation) and test accuracy.
"""
import argparse
import gzip
import json
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    ndim = data[3]
    dims = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def prefix(split):
    return "train" if split == "train" else "t10k"


def load(data_dir, split):
    x = read_idx(f"{data_dir}/{prefix(split)}-images-idx3-ubyte.gz").astype(np.float32) / 255.0
    y = read_idx(f"{data_dir}/{prefix(split)}-labels-idx1-ubyte.gz").astype(np.int64)
    x = (torch.from_numpy(x).unsqueeze(1) - 0.2860) / 0.3530
    return x, torch.from_numpy(y)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    xtr, ytr = load(a.data_dir, "train")
    xte, yte = load(a.data_dir, "test")
    model = nn.Sequential(
        nn.Conv2d(1, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(64 * 7 * 7, 128), nn.ReLU(), nn.Linear(128, 10))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(xtr, ytr),
                                         batch_size=128, shuffle=True)
    train_s, total_s, acc = [], [], 0.0
    for _ in range(a.epochs):
        t0 = time.perf_counter()
        model.train()
        for x, y in loader:
            opt.zero_grad()
            F.cross_entropy(model(x), y).backward()
            opt.step()
        t1 = time.perf_counter()
        model.eval()
        correct = 0
        with torch.no_grad():
            for i in range(0, len(xte), 500):
                correct += (model(xte[i:i + 500]).argmax(1) == yte[i:i + 500]).sum().item()
        acc = correct / len(xte)
        train_s.append(t1 - t0)
        total_s.append(time.perf_counter() - t0)
    print(json.dumps({"framework": "pytorch " + torch.__version__, "threads": a.threads,
                      "epochs": a.epochs, "train_seconds_per_epoch": train_s,
                      "seconds_per_epoch_with_eval": total_s, "test_accuracy": acc}))


if __name__ == "__main__":
    main()
