"""Whole jobs of PyTorch workers started by pstrain-launch --worker_cmd: the MLP example trains,
its final model loads as a state_dict, and a worker killed mid-epoch loses and duplicates nothing."""

import os
import re
import signal
import subprocess
import tempfile
import time
import unittest
import urllib.request
import uuid

import torch

import pstrain.torch as pst
from local_job import PYTHON, example, launch

TRAIN, TEST = 6000, 2000


def argv0(pid):
    """The program a process runs, from /proc ('' once it has gone)."""
    try:
        with open(f"/proc/{pid}/cmdline") as f:
            return f.read().split("\0")[0]
    except OSError:
        return ""


def epoch_samples(summary):
    return [e["samples"] for e in summary["epochs"]]


class TorchJobTest(unittest.TestCase):
    def test_mlp_example_trains_and_its_model_loads_as_a_state_dict(self):
        model_path = os.path.join(tempfile.mkdtemp(), "model.bin")
        # The launcher hands each Python worker a metrics port (PSTRAIN_METRICS_PORT): scrape them
        # while they train.
        scraped = {}

        def scrape(proc, output):
            for line in output.splitlines():
                match = re.match(r"\[launch\] metrics worker (\d) (http://\S+/metrics)$", line)
                if not match:
                    continue
                try:
                    with urllib.request.urlopen(match.group(2), timeout=2) as r:
                        text = r.read().decode()
                except OSError:
                    continue
                steps = re.search(r"^pstrain_worker_steps_total\{[^}]*\} (\d+)$", text, re.M)
                if steps and int(steps.group(1)) > 0:
                    scraped[match.group(1)] = int(steps.group(1))

        code, output, summary = launch(
            ["--model=external", "--servers=2", "--workers=2", "--epochs=3", f"--final_model={model_path}"],
            example("fashion_mlp.py", f"--train_limit={TRAIN}", f"--test_limit={TEST}"), on_progress=scrape)
        self.assertEqual(code, 0, output[-3000:])
        self.assertEqual(sorted(scraped), ["0", "1"], "both Python workers served /metrics with steps")
        self.assertTrue(all(w["bytes_sent"] > 0 and w["bytes_received"] > 0 for w in summary["workers"]),
                        summary["workers"])
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

    def test_async_and_ssp_workers_train_every_sample_once(self):
        for mode in ("async", "ssp"):
            with self.subTest(mode=mode):
                # Batches of 64: enough updates in 2 epochs for a stable accuracy in every mode.
                code, output, summary = launch(
                    [f"--mode={mode}", "--model=external", "--servers=2", "--workers=2", "--epochs=2",
                     "--batch_size=64"],
                    example("fashion_mlp.py", f"--train_limit={TRAIN}", f"--test_limit={TEST}"))
                self.assertEqual(code, 0, output[-3000:])
                self.assertEqual(epoch_samples(summary), [TRAIN] * 2)
                self.assertGreater(summary["final_test_accuracy"], 0.7, output[-2000:])

    def _run_and_signal_one(self, sig):
        """A 3-worker sync job; a second after all three started training, one gets `sig`."""
        tag = uuid.uuid4().hex
        signalled = []
        started = []

        def signal_one(proc, output):
            if signalled:
                return
            if not started:
                if output.count("parameters on") == 3:
                    started.append(time.time())
                return
            if time.time() - started[0] < 1.0:
                return
            pids = subprocess.run(["pgrep", "-f", tag], capture_output=True, text=True).stdout.split()
            # The workers themselves (exec'ed by their shell), not the launcher whose flag names them.
            python = [p for p in pids if argv0(p) == PYTHON]
            if len(python) == 3:
                os.kill(int(python[-1]), sig)
                signalled.append(python[-1])

        # Small batches make an epoch last a few seconds, so the signal lands inside one.
        code, output, summary = launch(
            ["--model=external", "--servers=2", "--workers=3", "--epochs=3", "--batch_size=16"],
            example("fashion_mlp.py", "--train_limit=12000", f"--test_limit={TEST}", f"--tag={tag}"),
            on_progress=signal_one)
        self.assertTrue(signalled, "no worker was signalled: " + output[-2000:])
        self.assertEqual(code, 0, output[-3000:])
        self.assertEqual(summary["state"], "FINISHED")
        self.assertEqual(epoch_samples(summary), [12000] * 3)
        self.assertTrue(all(e["train_loss"] is not None for e in summary["epochs"]), summary["epochs"])
        return output, [e["kind"] for e in summary.get("membership_events", [])]

    def test_killed_worker_loses_and_duplicates_no_sample(self):
        _, kinds = self._run_and_signal_one(signal.SIGKILL)
        self.assertIn("died", kinds)

    def test_sigterm_makes_a_worker_leave_cleanly(self):
        output, kinds = self._run_and_signal_one(signal.SIGTERM)
        self.assertIn("left", kinds)
        self.assertNotIn("died", kinds)
        self.assertIn("(left the job)", output)

if __name__ == "__main__":
    unittest.main()
