"""Fashion-MNIST, a CNN with BatchNorm and dropout (conv-BN-ReLU-pool twice, dropout, fc 64, fc 10),
trained as a worker of a pstrain job: a model of the kind a PyTorch user brings, not one of
pstrain's built-in networks.

    build/bin/pstrain-launch --model=external --batch_size=64 --epochs=3 \\
        --worker_cmd="/usr/bin/python3 examples/pytorch/fashion_cnn_bn.py"

BatchNorm's running statistics are buffers, not parameters: the servers keep their mean over the
workers after every step (pst.Trainer(buffers="average"), the default), and the saved model has
them, so `pstrain-eval`-style evaluation and the job's own agree. Dropout runs in training only:
the Trainer puts the model in eval() mode for the leased evaluation.
"""

import argparse

import torch
import torch.nn.functional as F

import pstrain.torch as pst  # pstrain
from fashion_data import load_fashion_mnist
from fashion_models import BnCnn


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data_dir", default="/usr/share/datasets/fashion-mnist")
    parser.add_argument("--train_limit", type=int, default=0, help="use only the first N training samples")
    parser.add_argument("--test_limit", type=int, default=0, help="use only the first N test samples")
    args, _ = parser.parse_known_args()  # pstrain reads --scheduler itself

    torch.manual_seed(1)
    train_set = load_fashion_mnist("train", args.data_dir, args.train_limit)
    test_set = load_fashion_mnist("test", args.data_dir, args.test_limit)
    model = BnCnn()

    trainer = pst.Trainer(model, train_set, test_set)  # pstrain: join the job; the servers hold the weights
    for x, y in trainer:  # pstrain: this worker's batches
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        trainer.step(loss)  # pstrain: push the gradients, install the new weights
    print(f"worker {trainer.rank}: done at epoch {trainer.epoch}{' (left the job)' if trainer.left else ''}")


if __name__ == "__main__":
    main()
