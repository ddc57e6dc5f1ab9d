"""BatchNorm's running statistics with two PyTorch workers on a real job: averaged by the servers
(the default), so both workers end with the same statistics, which are also in the final model;
or kept local (buffers="local")."""

import os
import tempfile
import threading
import unittest

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import TensorDataset

import pstrain.torch as pst
from local_job import Roles


def bn_model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 3))


def data(n=256):
    g = torch.Generator().manual_seed(2)
    x = torch.randn(n, 4, generator=g) * 3 + 1  # statistics far from BatchNorm's initial 0 / 1
    return TensorDataset(x, torch.randint(0, 3, (n,), generator=g))


def train_two_workers(address, buffers):
    models = [bn_model(), bn_model()]
    errors = []

    def work(model):
        try:
            trainer = pst.Trainer(model, data(), data(64), scheduler=address, buffers=buffers)
            for x, y in trainer:
                loss = F.cross_entropy(model(x), y)
                loss.backward()
                trainer.step(loss)
        except Exception as e:  # reported by the test thread
            errors.append(e)

    threads = [threading.Thread(target=work, args=(m,)) for m in models]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return models, errors


class BufferTest(unittest.TestCase):
    def test_running_statistics_are_averaged_over_the_workers(self):
        path = os.path.join(tempfile.mkdtemp(), "model.bin")
        with Roles(["--model=external", "--workers=2", "--epochs=2", "--batch_size=32", "--optimizer=sgd",
                    "--lr=0.05", f"--final_model={path}"]) as job:
            models, errors = train_two_workers(job.address, "average")
            self.assertEqual(errors, [], job.output()[-2000:])
        bn = [m[1] for m in models]
        torch.testing.assert_close(bn[0].running_mean, bn[1].running_mean, rtol=0, atol=0)
        torch.testing.assert_close(bn[0].running_var, bn[1].running_var, rtol=0, atol=0)
        # They moved from the initial 0 and 1 towards the data's statistics.
        self.assertGreater(bn[0].running_mean.abs().max().item(), 0.5)
        state = pst.load_state_dict(path)
        self.assertIn("1.running_mean", state)
        torch.testing.assert_close(state["1.running_mean"], bn[0].running_mean, rtol=0, atol=0)

    def test_local_buffers_stay_each_workers_own(self):
        with Roles(["--model=external", "--workers=2", "--epochs=1", "--batch_size=32", "--optimizer=sgd",
                    "--lr=0.05"]) as job:
            models, errors = train_two_workers(job.address, "local")
            self.assertEqual(errors, [], job.output()[-2000:])
        # Each worker saw other samples: its own statistics differ from the other's.
        self.assertFalse(torch.equal(models[0][1].running_mean, models[1][1].running_mean))


if __name__ == "__main__":
    unittest.main()
