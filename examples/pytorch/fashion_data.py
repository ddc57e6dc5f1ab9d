"""Fashion-MNIST from its IDX files (Debian's dataset-fashion-mnist), as a TensorDataset.

The examples read the files themselves: torchvision is not part of Debian's PyTorch. Pixels are
normalised as pstrain's C++ reader does, (p / 255 - 0.2860) / 0.3530, so the PyTorch and C++
workers train on the same numbers.
"""

import gzip
import os
import struct

import numpy as np
import torch
from torch.utils.data import TensorDataset

DEFAULT_DIR = "/usr/share/datasets/fashion-mnist"
PIXEL_MEAN, PIXEL_STD = 0.2860, 0.3530


def _read(path):
    with open(path, "rb") as f:
        data = f.read()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    return data


def _find(data_dir, stem):
    for name in (stem + ".gz", stem):
        path = os.path.join(data_dir, name)
        if os.path.exists(path):
            return path
    raise FileNotFoundError(f"{data_dir}: no {stem}[.gz]")


def load_fashion_mnist(split="train", data_dir=DEFAULT_DIR, limit=0):
    """The `split` ("train" or "test") as a TensorDataset of (float32 [N, 1, 28, 28], int64 [N]);
    the first `limit` samples when limit > 0."""
    prefix = "train" if split == "train" else "t10k"
    images = _read(_find(data_dir, f"{prefix}-images-idx3-ubyte"))
    labels = _read(_find(data_dir, f"{prefix}-labels-idx1-ubyte"))
    magic, count, rows, cols = struct.unpack_from(">IIII", images, 0)
    if magic != 0x803:
        raise ValueError(f"{split} images: magic {magic:#x}, expected 0x803")
    label_magic, label_count = struct.unpack_from(">II", labels, 0)
    if label_magic != 0x801 or label_count != count:
        raise ValueError(f"{split} labels: magic {label_magic:#x} and {label_count} labels for {count} images")
    n = min(count, limit) if limit > 0 else count
    pixels = np.frombuffer(images, dtype=np.uint8, count=n * rows * cols, offset=16).reshape(n, 1, rows, cols)
    x = (pixels.astype(np.float32) / 255.0 - PIXEL_MEAN) / PIXEL_STD
    y = np.frombuffer(labels, dtype=np.uint8, count=n, offset=8).astype(np.int64)
    return TensorDataset(torch.from_numpy(x), torch.from_numpy(y))
