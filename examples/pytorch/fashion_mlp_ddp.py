"""Fashion-MNIST, the same MLP as fashion_mlp.py, under PyTorch's DistributedDataParallel.

The baseline the pstrain version is compared with (bench/pytorch.sh, bench/pytorch_ddp.sh, and the
diff in docs/guides/pytorch.md):

    torchrun-free, with gloo on one machine:
    /usr/bin/python3 examples/pytorch/fashion_mlp_ddp.py --world_size=2

--model=cnn or --model=cnn_bn trains fashion_cnn.py's or fashion_cnn_bn.py's network instead.

spawns `world_size` processes; each takes batch_size samples a step (DistributedSampler), so the
global batch is world_size x batch_size, as in a pstrain sync job.
"""

import argparse
import json
import os
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler

from fashion_data import load_fashion_mnist
from fashion_models import MODELS


def run(rank, args):
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(args.port))
    dist.init_process_group("gloo", rank=rank, world_size=args.world_size)
    torch.manual_seed(1)
    train_set = load_fashion_mnist("train", args.data_dir, args.train_limit)
    test_set = load_fashion_mnist("test", args.data_dir, args.test_limit)
    model = DDP(MODELS[args.model]())
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    sampler = DistributedSampler(train_set, seed=1)
    loader = DataLoader(train_set, batch_size=args.batch_size, sampler=sampler)
    samples, train_seconds = 0, 0.0
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        model.train()
        start = time.perf_counter()
        for x, y in loader:
            optimizer.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
            samples += len(y)
        train_seconds += time.perf_counter() - start
    if rank == 0:
        model.eval()
        x, y = test_set.tensors
        with torch.no_grad():
            correct = sum((model.module(x[i:i + 1000]).argmax(dim=1) == y[i:i + 1000]).sum().item()
                          for i in range(0, len(y), 1000))
        accuracy = correct / len(y)
        result = {"final_test_accuracy": accuracy, "train_seconds": train_seconds,
                  "samples_per_second": samples * args.world_size / train_seconds}
        print(json.dumps(result))
        if args.result_json:
            with open(args.result_json, "w") as f:
                json.dump(result, f)
    dist.destroy_process_group()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--world_size", type=int, default=2)
    parser.add_argument("--model", default="mlp", choices=sorted(MODELS))
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--batch_size", type=int, default=256)
    parser.add_argument("--lr", type=float, default=0.002)
    parser.add_argument("--port", type=int, default=29533)
    parser.add_argument("--data_dir", default="/usr/share/datasets/fashion-mnist")
    parser.add_argument("--train_limit", type=int, default=0)
    parser.add_argument("--test_limit", type=int, default=0)
    parser.add_argument("--result_json", default="")
    args = parser.parse_args()
    mp.spawn(run, args=(args,), nprocs=args.world_size)


if __name__ == "__main__":
    main()
