"""Whole jobs of PyTorch workers started by pstrain-launch --worker_cmd: the MLP example trains,
its final model loads as a state_dict, and a worker killed mid-epoch loses and duplicates nothing."""

import os
import signal
import subprocess
import tempfile
import time
import unittest
import uuid

import torch

import pstrain.torch as pst
from local_job import PYTHON, example, launch

TRAIN, TEST = 6000, 2000


def epoch_samples(summary):
    return [e["samples"] for e in summary["epochs"]]


class TorchJobTest(unittest.TestCase):
    def test_mlp_example_trains_and_its_model_loads_as_a_state_dict(self):
        model_path = os.path.join(tempfile.mkdtemp(), "model.bin")
        code, output, summary = launch(
            ["--model=external", "--servers=2", "--workers=2", "--epochs=3", f"--final_model={model_path}"],
            example("fashion_mlp.py", f"--train_limit={TRAIN}", f"--test_limit={TEST}"))
        self.assertEqual(code, 0, output[-3000:])
        self.assertEqual(summary["state"], "FINISHED")
        self.assertEqual(epoch_samples(summary), [TRAIN] * 3)
        self.assertTrue(all(e["train_loss"] is not None for e in summary["epochs"]), summary["epochs"])
        self.assertGreater(summary["final_test_accuracy"], 0.75, output[-2000:])
        # The final model is the servers' weights, by the module's own parameter names.
        import fashion_data
        import fashion_models
        model = fashion_models.make_mlp()
        state = pst.load_state_dict(model_path, model)
        self.assertEqual(list(state), [n for n, _ in model.named_parameters()])
        test = fashion_data.load_fashion_mnist("test", limit=TEST)
        x, y = test.tensors
        with torch.no_grad():
            accuracy = (model(x).argmax(dim=1) == y).float().mean().item()
        self.assertAlmostEqual(accuracy, summary["final_test_accuracy"], places=3)

    def test_cnn_example_trains(self):
        # A short run: the example's network, data and loop work; bench/pytorch.sh measures it.
        code, output, summary = launch(
            ["--model=external", "--servers=2", "--workers=2", "--epochs=1", "--batch_size=64"],
            example("fashion_cnn.py", "--train_limit=2000", "--test_limit=500"))
        self.assertEqual(code, 0, output[-3000:])
        self.assertEqual(epoch_samples(summary), [2000])
        self.assertGreater(summary["final_test_accuracy"], 0.5, output[-2000:])

    def test_killed_worker_loses_and_duplicates_no_sample(self):
        tag = uuid.uuid4().hex
        killed = []
        started = []

        def kill_one(proc, output):
            # A second after all three workers started training (an epoch takes a few), kill one.
            if killed:
                return
            if not started:
                if output.count("parameters on") == 3:
                    started.append(time.time())
                return
            if time.time() - started[0] < 1.0:
                return
            pids = subprocess.run(["pgrep", "-f", tag], capture_output=True, text=True).stdout.split()
            # The workers themselves (exec'ed by their shell), not the launcher whose flag names them.
            python = [p for p in pids if open(f"/proc/{p}/cmdline").read().split("\0")[0] == PYTHON]
            if len(python) == 3:
                os.kill(int(python[-1]), signal.SIGKILL)
                killed.append(python[-1])

        # Small batches make an epoch last a few seconds, so the kill lands inside one.
        train = 12000
        code, output, summary = launch(
            ["--model=external", "--servers=2", "--workers=3", "--epochs=3", "--batch_size=16"],
            example("fashion_mlp.py", f"--train_limit={train}", f"--test_limit={TEST}", f"--tag={tag}"),
            on_progress=kill_one)
        self.assertTrue(killed, "no worker was killed: " + output[-2000:])
        self.assertEqual(code, 0, output[-3000:])
        self.assertEqual(summary["state"], "FINISHED")
        self.assertEqual(epoch_samples(summary), [train] * 3)
        self.assertTrue(all(e["train_loss"] is not None for e in summary["epochs"]), summary["epochs"])
        kinds = [e["kind"] for e in summary.get("membership_events", [])]
        self.assertIn("died", kinds, summary.get("membership_events"))


if __name__ == "__main__":
    unittest.main()
