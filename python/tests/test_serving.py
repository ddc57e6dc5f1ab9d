"""A PyTorch model served outside its job: examples/pytorch/ctr.py trains (pstrain-launch, 2 servers
x 2 workers, sync, a checkpoint every step, a base every 5), pstrain-export writes its last cut (the
model and tables the workers declared are read from beside the checkpoints), and
  - pstrain.read_export holds the final model's dense tensors bit for bit and every table's rows;
  - pstrain-serve serving that export answers pstrain.ServeClient's lookups with those rows, and
    keys without a row with pstrain's initial values (pstrain._core.initial_rows);
  - pstrain.torch.load_export puts it into a fresh CtrNet whose test log loss is the run summary's,
    and the same model with its rows looked up through the ServeClient (serve_tables) computes the
    same logits bit for bit;
  - examples/pytorch/serve_ctr.py prints that log loss, from the export and from the server."""

import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest

import numpy as np
import torch

import pstrain
import pstrain.torch as pst
from local_job import EXAMPLES, PYTHON, binary, example, launch

sys.path.insert(0, EXAMPLES)
from ctr import CtrNet  # noqa: E402
from serve_ctr import evaluate  # noqa: E402

TRAIN, TEST, KEYS = 6000, 1000, 4000


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServingTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        work = tempfile.mkdtemp(prefix="pstrain-serving-")
        cls.data = os.path.join(work, "data")
        subprocess.run([binary("pstrain-gen-ctr"), f"--out_dir={cls.data}", f"--train_samples={TRAIN}",
                        f"--test_samples={TEST}", f"--unique_keys={KEYS}", "--seed=3"], check=True,
                       capture_output=True)
        ckpt = os.path.join(work, "ckpt")
        cls.final = os.path.join(work, "final.bin")
        code, output, cls.summary = launch(
            ["--model=external", "--data_format=criteo", f"--data_dir={cls.data}", "--servers=2", "--workers=2",
             "--mode=sync", "--epochs=1", "--batch_size=256", "--embedding_dim=8", "--hidden=32,16",
             f"--checkpoint_dir={ckpt}", "--checkpoint_every_steps=1", "--full_checkpoint_every=5",
             f"--final_model={cls.final}"],
            example("ctr.py"), timeout=240)
        assert code == 0, output[-3000:]
        cls.export = os.path.join(work, "export")
        # The layout and the tables of the model the workers declared: recorded by the scheduler
        # beside the checkpoints.
        exported = subprocess.run([binary("pstrain-export"), f"--checkpoint_dir={ckpt}", f"--out={cls.export}"],
                                  capture_output=True, text=True)
        assert exported.returncode == 0, exported.stdout + exported.stderr
        port = free_port()
        cls.address = f"127.0.0.1:{port}"
        cls.serve_log = open(os.path.join(work, "serve.log"), "w+")
        cls.serve = subprocess.Popen([binary("pstrain-serve"), f"--export_dir={cls.export}", f"--port={port}"],
                                     stdout=cls.serve_log, stderr=subprocess.STDOUT)
        cls.client = pstrain.ServeClient(cls.address)
        for _ in range(100):
            try:
                cls.client.model_info()
                break
            except pstrain.Error:
                time.sleep(0.1)

    @classmethod
    def tearDownClass(cls):
        cls.serve.send_signal(signal.SIGTERM)
        cls.serve.wait(timeout=10)
        cls.serve_log.close()

    def model(self):
        return CtrNet([f"C{f + 1}" for f in range(26)], 13, 8, [32, 16])

    def test_the_export_holds_the_final_model_and_every_row(self):
        export = pstrain.read_export(self.export)
        final = pstrain.read_model_file(self.final)
        self.assertEqual(sorted(export["dense"]), sorted(final))
        for name, value in final.items():
            np.testing.assert_array_equal(export["dense"][name], value, err_msg=name)
        self.assertEqual(len(export["tables"]), 26)
        c1 = export["tables"]["C1"]
        self.assertEqual(c1["values"].shape, (len(c1["keys"]), 8))
        self.assertTrue(np.all(np.diff(c1["keys"].astype(np.float64)) > 0))

    def test_serve_client_answers_the_exports_rows_and_initial_values(self):
        export = pstrain.read_export(self.export)
        info = self.client.model_info()
        self.assertEqual(info["step"], export["step"])
        c3 = export["tables"]["C3"]
        unseen = np.array([1, 2, 3], dtype=np.uint64)
        keys = np.concatenate([c3["keys"], unseen])
        step, values, found = self.client.lookup("C3", keys)
        self.assertEqual(step, export["step"])
        np.testing.assert_array_equal(values[:len(c3["keys"])], c3["values"])
        self.assertTrue(found[:len(c3["keys"])].all())
        self.assertFalse(found[len(c3["keys"]):].any())
        np.testing.assert_array_equal(values[len(c3["keys"]):],
                                      pstrain._core.initial_rows(unseen, 8, c3["seed"], c3["id"], c3["init_bound"]))
        with self.assertRaisesRegex(pstrain.InvalidArgumentError, "unknown table 'nope'"):
            self.client.lookup("nope", unseen)
        with self.assertRaisesRegex(pstrain.InvalidArgumentError, "keys are a NumPy array of kind 'f'"):
            self.client.lookup("C3", np.zeros(2, dtype=np.float64))

    def test_a_loaded_export_and_served_rows_give_the_runs_log_loss(self):
        test = pst.CtrDataset(pstrain.find_ctr_file(self.data, "criteo", "test"), "criteo")
        local = self.model()
        pst.load_export(self.export, local)
        loss, _ = evaluate(local, test)
        self.assertAlmostEqual(loss, self.summary["final_test_logloss"], delta=1e-4)
        served = self.model()
        pst.load_state_dict(self.final, served)
        pst.serve_tables(served, self.client)
        batch, _ = test.batch(range(0, 500))
        with torch.no_grad():
            self.assertTrue(torch.equal(local(batch), served(batch)))
        # A model whose table is of another width is refused, naming it.
        wrong = CtrNet([f"C{f + 1}" for f in range(26)], 13, 4, [32, 16])
        with self.assertRaisesRegex(pstrain.InvalidArgumentError, "has dim 4; the export .* has dim 8"):
            pst.load_export(self.export, wrong)

    def test_the_example_prints_the_log_loss_from_the_export_and_from_the_server(self):
        for extra in ([], [f"--serve={self.address}"]):
            run = subprocess.run([PYTHON, os.path.join(EXAMPLES, "serve_ctr.py"), f"--export={self.export}",
                                  f"--data_dir={self.data}", *extra], capture_output=True, text=True, timeout=120)
            self.assertEqual(run.returncode, 0, run.stderr[-2000:])
            loss = float(re.search(r"test log loss ([0-9.]+)", run.stdout).group(1))
            self.assertAlmostEqual(loss, self.summary["final_test_logloss"], delta=1e-4)


if __name__ == "__main__":
    unittest.main()
