"""The Fashion-MNIST networks of the examples, in plain PyTorch: the same MLP and CNN as
pstrain-worker's built-in --model=mlp and --model=cnn, and a CNN with BatchNorm and dropout as an
outside model would have them."""

import torch
import torch.nn as nn
import torch.nn.functional as F


def make_mlp():
    """784-256-128-10 with ReLU."""
    return nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(),
                         nn.Linear(128, 10))


class Cnn(nn.Module):
    """conv 5x5x32, max-pool 2, conv 5x5x64, max-pool 2, fully connected 128, fully connected 10."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 5, padding=2)
        self.conv2 = nn.Conv2d(32, 64, 5, padding=2)
        self.fc1 = nn.Linear(64 * 7 * 7, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = F.relu(self.fc1(torch.flatten(x, 1)))
        return self.fc2(x)


class BnCnn(nn.Module):
    """conv 3x3x16-BN-ReLU-pool, conv 3x3x32-BN-ReLU-pool, dropout 0.25, fc 64, fc 10: 105,962
    parameters (and BatchNorm's running statistics, which pstrain averages over the workers)."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(16)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(32)
        self.dropout = nn.Dropout(0.25)
        self.fc1 = nn.Linear(32 * 7 * 7, 64)
        self.fc2 = nn.Linear(64, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)
        x = F.max_pool2d(F.relu(self.bn2(self.conv2(x))), 2)
        x = self.dropout(torch.flatten(x, 1))
        return self.fc2(F.relu(self.fc1(x)))


# The networks by the name the examples' --model flag takes.
MODELS = {"mlp": make_mlp, "cnn": Cnn, "cnn_bn": BnCnn}
