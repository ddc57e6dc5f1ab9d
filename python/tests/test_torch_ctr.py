"""examples/pytorch/ctr.py as a whole job (pstrain-launch --worker_cmd, 2 servers x 2 workers, sync)
on a small data set from pstrain-gen-ctr: it trains the 26 Criteo tables the script declares,
counts every record once per epoch, and learns the planted model (test AUC well above chance)."""

import os
import subprocess
import tempfile
import time
import unittest

from local_job import binary, example, launch

TRAIN, TEST, KEYS = 30000, 4000, 20000
EPOCHS = 2


def generate(out_dir):
    subprocess.run([binary("pstrain-gen-ctr"), f"--out_dir={out_dir}", f"--train_samples={TRAIN}",
                    f"--test_samples={TEST}", f"--unique_keys={KEYS}", "--seed=3"],
                   check=True, capture_output=True)


class TorchCtrJobTest(unittest.TestCase):
    def test_ctr_example_trains_every_record_once_and_learns(self):
        data = tempfile.mkdtemp(prefix="pstrain-ctr-")
        generate(data)
        started = time.time()
        code, output, summary = launch(
            ["--model=external", "--data_format=criteo", f"--data_dir={data}", "--servers=2", "--workers=2",
             "--mode=sync", f"--epochs={EPOCHS}", "--batch_size=256"],
            example("ctr.py"), timeout=240)
        seconds = time.time() - started
        self.assertEqual(code, 0, output[-3000:])
        self.assertEqual(summary["state"], "FINISHED")
        self.assertEqual([e["samples"] for e in summary["epochs"]], [TRAIN] * EPOCHS)
        self.assertTrue(all(e["train_loss"] is not None for e in summary["epochs"]), summary["epochs"])
        # --model=ctr with the same flags on this data reaches 0.768 (the planted model 0.895).
        self.assertGreater(summary["final_test_auc"], 0.7, output[-2000:])
        print(f"\nctr.py: {EPOCHS} epochs of {TRAIN} records in {seconds:.1f} s, final test AUC "
              f"{summary['final_test_auc']:.4f}")


if __name__ == "__main__":
    unittest.main()
