"""Fashion-MNIST, a CNN (conv 5x5x32, pool, conv 5x5x64, pool, fc 128, fc 10), trained as a worker
of a pstrain job: the same network as pstrain-worker --model=cnn, written in PyTorch.

    build/bin/pstrain-launch --model=external --batch_size=64 --epochs=8 \\
        --worker_cmd="/usr/bin/python3 examples/pytorch/fashion_cnn.py"
"""

import argparse

import torch
import torch.nn.functional as F

import pstrain.torch as pst  # pstrain
from fashion_data import load_fashion_mnist
from fashion_models import Cnn


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data_dir", default="/usr/share/datasets/fashion-mnist")
    parser.add_argument("--train_limit", type=int, default=0, help="use only the first N training samples")
    parser.add_argument("--test_limit", type=int, default=0, help="use only the first N test samples")
    args, _ = parser.parse_known_args()  # pstrain reads --scheduler itself

    torch.manual_seed(1)
    train_set = load_fashion_mnist("train", args.data_dir, args.train_limit)
    test_set = load_fashion_mnist("test", args.data_dir, args.test_limit)
    model = Cnn()

    trainer = pst.Trainer(model, train_set, test_set)  # pstrain: join the job; the servers hold the weights
    for x, y in trainer:  # pstrain: this worker's batches
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        trainer.step(loss)  # pstrain: push the gradients, install the new weights
    print(f"worker {trainer.rank}: done at epoch {trainer.epoch}{' (left the job)' if trainer.left else ''}")


if __name__ == "__main__":
    main()
