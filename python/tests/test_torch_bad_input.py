"""Bad input to pstrain.torch gets a clear Python exception naming the parameter or the cause, and
changes nothing on the job: each case against a real scheduler (and server) on 127.0.0.1."""

import tempfile
import unittest

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import TensorDataset

import pstrain
import pstrain.torch as pst
from local_job import Roles


def tiny_model(out=3):
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 5), nn.ReLU(), nn.Linear(5, out))


def tiny_data(n=64):
    g = torch.Generator().manual_seed(1)
    return TensorDataset(torch.randn(n, 4, generator=g), torch.randint(0, 3, (n,), generator=g))


def declare(member, model, n_train=64, n_test=0):
    params = list(model.named_parameters())
    values = np.concatenate([p.detach().reshape(-1).numpy() for _, p in params]).astype(np.float32)
    member.declare_model([n for n, _ in params], [list(p.shape) for _, p in params], values, n_train, n_test)


class BadInputTest(unittest.TestCase):
    def test_module_that_does_not_match_the_job_is_refused(self):
        with Roles(["--model=external", "--workers=3"]) as job:
            first = pstrain.join(job.address)
            declare(first, tiny_model(out=3))
            with self.assertRaises(pstrain.InvalidArgumentError) as caught:
                pst.Trainer(tiny_model(out=4), tiny_data(), scheduler=job.address)
            self.assertIn("'2.weight'", str(caught.exception))
            self.assertIn("[4, 5]", str(caught.exception))
            # The job's model is still the first one: a matching declaration is taken.
            declare(pstrain.join(job.address), tiny_model(out=3))

    def test_data_set_of_another_length_than_the_job_is_refused(self):
        with Roles(["--model=external", "--workers=1", "--train_samples=100"]) as job:
            with self.assertRaises(pstrain.InvalidArgumentError) as caught:
                pst.Trainer(tiny_model(), tiny_data(64), scheduler=job.address)
            self.assertIn("64", str(caught.exception))
            self.assertIn("100", str(caught.exception))

    def test_stream_job_takes_a_ctr_stream_and_no_sizes(self):
        stream = tempfile.mkdtemp(prefix="pstrain-bad-stream-")
        with Roles(["--model=external", "--workers=3", f"--data_stream={stream}"]) as job:
            with self.assertRaisesRegex(pstrain.InvalidArgumentError, r"CtrStream"):
                pst.Trainer(tiny_model(), tiny_data(), scheduler=job.address)
            with self.assertRaisesRegex(pstrain.InvalidArgumentError, r"no test set"):
                pst.Trainer(tiny_model(), pst.CtrStream(stream), tiny_data(), scheduler=job.address)
            # A declaration with sizes (a script that counts its own records) changes nothing.
            member = pstrain.join(job.address)
            with self.assertRaisesRegex(pstrain.InvalidArgumentError, r"data stream.*expected 0 and 0"):
                declare(member, tiny_model(), n_train=64)
            declare(member, tiny_model(), n_train=0)
        with Roles(["--model=external", "--workers=1"]) as job:
            with self.assertRaisesRegex(pstrain.InvalidArgumentError, r"--data_stream="):
                pst.Trainer(tiny_model(), pst.CtrStream(stream), scheduler=job.address)

    def test_wrong_dtype_and_device_name_the_parameter(self):
        with Roles(["--model=external", "--workers=2"]) as job:
            with self.assertRaisesRegex(pstrain.InvalidArgumentError, r"parameter '0.weight' is torch.float64"):
                pst.Trainer(tiny_model().double(), tiny_data(), scheduler=job.address)
            meta = nn.Linear(4, 3, device="meta")
            with self.assertRaisesRegex(pstrain.InvalidArgumentError, r"parameter 'weight' is on meta"):
                pst.Trainer(meta, tiny_data(), scheduler=job.address)

    def test_initial_values_must_be_contiguous_float32(self):
        with Roles(["--model=external", "--workers=1"]) as job:
            member = pstrain.join(job.address)
            with self.assertRaisesRegex(pstrain.InvalidArgumentError, "dtype float64, expected float32"):
                member.declare_model(["w"], [[4]], np.zeros(4, np.float64), 10, 0)
            with self.assertRaisesRegex(pstrain.InvalidArgumentError, "not C-contiguous"):
                member.declare_model(["w"], [[4]], np.zeros(8, np.float32)[::2], 10, 0)
            with self.assertRaisesRegex(pstrain.InvalidArgumentError, "3 floats, expected 4"):
                member.declare_model(["w"], [[4]], np.zeros(3, np.float32), 10, 0)

    def test_builtin_model_job_is_refused_with_the_flag_to_use(self):
        with Roles(["--model=mlp", "--workers=1"]) as job:
            with self.assertRaisesRegex(pstrain.InvalidArgumentError, "--model=external"):
                pst.Trainer(tiny_model(), tiny_data(), scheduler=job.address)

    def test_script_that_also_steps_a_torch_optimizer_is_stopped_before_it_pushes(self):
        with Roles(["--model=external", "--workers=1", "--batch_size=16", "--epochs=1"]) as job:
            model = tiny_model()
            trainer = pst.Trainer(model, tiny_data(), scheduler=job.address)
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            batches = iter(trainer)
            x, y = next(batches)
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
            with self.assertRaisesRegex(pstrain.InvalidArgumentError, "changed in place outside pstrain"):
                trainer.step(loss)
            # The step was not pushed: the servers are still at step 0.
            self.assertEqual(trainer.session.global_step, 0)

    def test_nan_gradient_is_refused_and_fails_the_job_at_once(self):
        with Roles(["--model=external", "--workers=1", "--batch_size=16", "--epochs=1"]) as job:
            model = tiny_model()
            trainer = pst.Trainer(model, tiny_data(), scheduler=job.address)
            x, y = next(iter(trainer))
            loss = F.cross_entropy(model(x) * float("nan"), y)
            loss.backward()
            with self.assertRaisesRegex(pstrain.InvalidArgumentError, "nan"):
                trainer.step(loss)
            self.assertEqual(trainer.session.global_step, 0)  # nothing applied
            # The worker told the scheduler, as pstrain-worker does: the job failed with its reason.
            with self.assertRaisesRegex(pstrain.AbortedError, "nan"):
                pstrain.join(job.address)


if __name__ == "__main__":
    unittest.main()
