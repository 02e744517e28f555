#!/usr/bin/python3
"""PyTorch side of kiln's end-to-end training parity test (tests/train/test_e2e_parity.cpp).

Usage: /usr/bin/python3 e2e_torch_reference.py OUT_DIR [--data-dir DIR] [--steps N]
                                                       [--batch B] [--seed S]

Builds kiln::nn::small_cnn() in PyTorch (same attribute names, so the state_dict keys match
kiln's key for key), seeds torch, and writes into OUT_DIR:

  exchange.safetensors      the initial state_dict (float32, as torch initializes it) and the
                            batches: "data.images" F32 [N, B, 1, 28, 28] (already scaled to [0, 1]
                            and normalized with mean 0.2860, std 0.3530), "data.labels" I64 [N, B];
                            metadata says where the data came from
  result_float64.safetensors, result_float32.safetensors
                            after N steps of SGD (lr 0.01, momentum 0.9) on cross_entropy in train
                            mode (BatchNorm uses batch statistics), with the model and data in that
                            dtype: "losses" F64 [N] (the loss of every step, computed before its
                            update) and the final state_dict (weights and BatchNorm buffers)

The batches come from the real Fashion-MNIST training set (DIR/train-*-ubyte.gz, read with gzip
and numpy): a seeded draw of N * B distinct images. When the files are absent the batches are
deterministic synthetic images instead (metadata "data_source" says which).

Safetensors is written by hand with json + numpy (no `safetensors` package, as in
tests/io/torch_interop.py), so the test also exercises kiln's reader on a foreign writer.
Run it with Debian's interpreter (/usr/bin/python3, package python3-torch). Exit status 3 means
torch or numpy cannot be imported.
"""
import argparse
import gzip
import json
import os
import struct
import sys

INSTALL_HINT = (
    "e2e_torch_reference.py: cannot import {}. Install Debian's PyTorch and NumPy with "
    "`apt-get install python3-torch python3-numpy` and run this script with /usr/bin/python3 (the "
    "python3 first on PATH may be a different interpreter without Debian's packages)."
)

try:
    import numpy as np
except ImportError:  # pragma: no cover - depends on the machine
    print(INSTALL_HINT.format("numpy"), file=sys.stderr)
    sys.exit(3)
try:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError:  # pragma: no cover - depends on the machine
    print(INSTALL_HINT.format("torch"), file=sys.stderr)
    sys.exit(3)

MEAN, STD = 0.2860, 0.3530  # Fashion-MNIST train statistics (as in bench/)
LR, MOMENTUM = 0.01, 0.9
DTYPE_NAMES = {torch.float64: "F64", torch.float32: "F32", torch.int64: "I64"}


class SmallCnn(nn.Module):
    """kiln/nn/models.cpp's SmallCnn: the same layers under the same attribute names."""

    def __init__(self, in_channels=1, classes=10, image_size=28):
        super().__init__()
        side = image_size // 2 // 2
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


def save_safetensors(path, tensors, metadata):
    """tensors: dict name -> torch tensor (F64/F32/I64), written in insertion order."""
    header = {"__metadata__": metadata}
    chunks, offset = [], 0
    for name, t in tensors.items():
        raw = t.detach().contiguous().numpy().tobytes()  # numpy on x86-64 is little endian
        header[name] = {"dtype": DTYPE_NAMES[t.dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    text = json.dumps(header).encode("utf-8")
    text += b" " * (-len(text) % 8)  # data starts 8-byte aligned, as the format recommends
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for raw in chunks:
            f.write(raw)


def read_idx_gz(path, magic, dims):
    with gzip.open(path, "rb") as f:
        data = f.read()
    got_magic, *shape = struct.unpack(">" + "I" * (1 + dims), data[:4 * (1 + dims)])
    if got_magic != magic:
        raise ValueError(f"{path}: magic {got_magic:#x}, expected {magic:#x}")
    return np.frombuffer(data, dtype=np.uint8, offset=4 * (1 + dims)).reshape(shape)


def load_batches(data_dir, steps, batch, seed):
    """Returns (images F32 [steps, batch, 1, 28, 28], labels I64 [steps, batch], source)."""
    images_path = os.path.join(data_dir, "train-images-idx3-ubyte.gz")
    labels_path = os.path.join(data_dir, "train-labels-idx1-ubyte.gz")
    gen = torch.Generator().manual_seed(seed)
    if os.path.exists(images_path) and os.path.exists(labels_path):
        images = read_idx_gz(images_path, 0x803, 3)
        labels = read_idx_gz(labels_path, 0x801, 1)
        pick = torch.randperm(images.shape[0], generator=gen)[:steps * batch].numpy()
        # Scale and normalize in float64, then round once to float32: both frameworks then start
        # from the very same float32 values (and float64 runs widen them exactly).
        x = (images[pick].astype(np.float64) / 255.0 - MEAN) / STD
        x = torch.from_numpy(x.astype(np.float32)).reshape(steps, batch, 1, 28, 28)
        y = torch.from_numpy(labels[pick].astype(np.int64)).reshape(steps, batch)
        return x, y, f"fashion-mnist train ({data_dir})"
    x = torch.randn(steps, batch, 1, 28, 28, generator=gen, dtype=torch.float32)
    y = torch.randint(0, 10, (steps, batch), generator=gen, dtype=torch.int64)
    return x, y, "synthetic (torch.randn images, seeded; Fashion-MNIST files not found)"


def train(initial_state, images, labels, dtype):
    model = SmallCnn()
    model.load_state_dict(initial_state)
    model.to(dtype)  # floating parameters and buffers only; num_batches_tracked stays int64
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM, foreach=False)
    losses = []
    for step in range(images.shape[0]):
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(images[step].to(dtype)), labels[step])
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, model.state_dict()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out_dir")
    parser.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    torch.set_num_threads(1)  # the machine is shared; results do not depend on it
    torch.manual_seed(args.seed)
    initial = {k: v.clone() for k, v in SmallCnn().state_dict().items()}
    images, labels, source = load_batches(args.data_dir, args.steps, args.batch, args.seed + 1)

    metadata = {"data_source": source, "steps": str(args.steps), "batch": str(args.batch),
                "seed": str(args.seed), "lr": str(LR), "momentum": str(MOMENTUM),
                "torch": torch.__version__}
    exchange = dict(initial)
    exchange["data.images"] = images
    exchange["data.labels"] = labels
    save_safetensors(os.path.join(args.out_dir, "exchange.safetensors"), exchange, metadata)

    for dtype, tag in ((torch.float64, "float64"), (torch.float32, "float32")):
        losses, final = train(initial, images, labels, dtype)
        out = {"losses": torch.tensor(losses, dtype=torch.float64)}
        out.update(final)
        save_safetensors(os.path.join(args.out_dir, f"result_{tag}.safetensors"), out,
                         dict(metadata, dtype=tag))
        print(f"{tag}: loss {losses[0]:.6f} -> {losses[-1]:.6f}")
    print(f"data: {source}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
