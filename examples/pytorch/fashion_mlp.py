"""Fashion-MNIST, an MLP (784-256-128-10), trained as a worker of a pstrain job.

An ordinary PyTorch training script; the lines marked "pstrain" are all it takes (compare
fashion_mlp_ddp.py, the same script under DistributedDataParallel). Start the job and its workers:

    build/bin/pstrain-launch --model=external --worker_cmd="/usr/bin/python3 examples/pytorch/fashion_mlp.py"

The job (mode, batch size, epochs, optimizer, learning rate) is the launcher's or the scheduler's;
this script only says what the model is and where the data comes from.
"""

import argparse

import torch
import torch.nn.functional as F

import pstrain.torch as pst  # pstrain
from fashion_data import load_fashion_mnist
from fashion_models import make_mlp


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data_dir", default="/usr/share/datasets/fashion-mnist")
    parser.add_argument("--train_limit", type=int, default=0, help="use only the first N training samples")
    parser.add_argument("--test_limit", type=int, default=0, help="use only the first N test samples")
    args, _ = parser.parse_known_args()  # pstrain reads --scheduler itself

    torch.manual_seed(1)
    train_set = load_fashion_mnist("train", args.data_dir, args.train_limit)
    test_set = load_fashion_mnist("test", args.data_dir, args.test_limit)
    model = make_mlp()

    trainer = pst.Trainer(model, train_set, test_set)  # pstrain: join the job; the servers hold the weights
    for x, y in trainer:  # pstrain: this worker's batches
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        trainer.step(loss)  # pstrain: push the gradients, install the new weights
    print(f"worker {trainer.rank}: done at epoch {trainer.epoch}{' (left the job)' if trainer.left else ''}")


if __name__ == "__main__":
    main()
