"""Embedding tables of a PyTorch model on a real job (scheduler and servers on 127.0.0.1, the test
the worker): the model's tables are declared and adopted, rows start where the table says and move
by exactly the table optimizer's step on the batch's gradient (keys on both servers, repeated keys
summed), the scores of an evaluation make a test AUC, and a model whose tables differ from the
job's is refused with the difference named."""

import json
import os
import tempfile
import unittest

import numpy as np
import torch
import torch.nn as nn
from torch.utils.data import TensorDataset

import pstrain
import pstrain.torch as pst
from local_job import Roles

DIM = 3
BATCH = 4


class KeyModel(nn.Module):
    """Per sample: the sum of its keys' rows, times a dense scale (the job needs a dense tensor)."""

    def __init__(self, table="user", dim=DIM, **table_options):
        super().__init__()
        self.emb = pst.Embedding(table, dim, **table_options)
        self.scale = nn.Parameter(torch.ones(1))

    def forward(self, keys):
        return self.emb(keys).sum(dim=(1, 2)) * self.scale


def key_data():
    # Two batches of four samples of two keys each; 2**63 + 5 (negative as int64) is a key too.
    big = -(2**63) + 5
    keys = torch.tensor([[1, 2], [2, 2], [big, 1], [9, 2],
                         [1, 2], [big, 7], [9, 9], [3, 3]], dtype=torch.int64)
    return TensorDataset(keys, torch.zeros(8)), keys


# One worker, two batches, the dense part at a constant SGD rate.
SGD_JOB = ["--model=external", "--workers=1", f"--batch_size={BATCH}", "--epochs=1", "--optimizer=sgd", "--lr=0.1",
           "--lr_schedule=constant"]


def each_lookup(x, rows):
    """(key, its row) for every key of a batch and the rows looked up for it."""
    for i, sample in enumerate(x.tolist()):
        for j, k in enumerate(sample):
            yield k, rows[i, j]


def first_step(test, trainer, model):
    """Trains the first batch: (the batches' iterator, how often each key of that batch appeared, the
    sum of the absolute outputs before the step)."""
    batches = iter(trainer)
    x, _ = next(batches)
    out = model(x)
    before = out.abs().sum().item()
    loss = out.mean()
    loss.backward()
    test.assertTrue(trainer.step(loss))
    counts = {}
    for k in x.reshape(-1).tolist():
        counts[k] = counts.get(k, 0) + 1
    return batches, counts, before


def last_step(test, trainer, model, batches, rows):
    """Trains the second and last batch from its rows."""
    loss = (rows.sum(dim=(1, 2)) * model.scale).mean()
    loss.backward()
    test.assertTrue(trainer.step(loss))
    for _ in batches:
        test.fail("two batches only")


class SparseJobTest(unittest.TestCase):
    def test_rows_move_by_the_tables_own_optimizer_and_the_job_adopts_the_table(self):
        with Roles(SGD_JOB, servers=2) as job:
            model = KeyModel(init_bound=0.0, optimizer={"type": "sgd", "lr": 1.0})
            data, _ = key_data()
            trainer = pst.Trainer(model, data, scheduler=job.address)
            self.assertEqual([(t["name"], t["dim"], t["optimizer"], t["lr"]) for t in trainer.session.tables],
                             [("user", DIM, "sgd", 1.0)])
            self.assertFalse(trainer.job["overlap"])  # row gradients travel with the whole push
            batches, counts, before = first_step(self, trainer, model)
            self.assertEqual(before, 0)  # init_bound 0: every row starts at zero
            # d(mean loss)/d(row k) = (times k appears in the batch) / BATCH; SGD at lr 1 from 0.
            x, _ = next(batches)
            rows = model.emb(x)
            for k, row in each_lookup(x, rows):
                torch.testing.assert_close(row, torch.full((DIM,), -counts.get(k, 0) / BATCH), msg=f"key {k}")
            last_step(self, trainer, model, batches, rows)

    def test_fp16_rows_hold_the_sgd_step_rounded_to_fp16(self):
        with Roles(SGD_JOB, servers=2) as job:
            model = KeyModel(init_bound=0.0, optimizer={"type": "sgd", "lr": 0.1}, row_dtype="fp16")
            data, _ = key_data()
            trainer = pst.Trainer(model, data, scheduler=job.address)
            self.assertEqual([(t["name"], t["row_dtype"]) for t in trainer.session.tables], [("user", "fp16")])
            batches, counts, _ = first_step(self, trainer, model)
            x, _ = next(batches)
            rows = model.emb(x)
            for k, row in each_lookup(x, rows):
                # In fp32 on the server, -lr * g, then rounded to the nearest fp16.
                step = -(torch.tensor(0.1) * torch.tensor(counts.get(k, 0) / BATCH))
                self.assertEqual(row.tolist(), [step.to(torch.float16).item()] * DIM, msg=f"key {k}")
            last_step(self, trainer, model, batches, rows)

    def test_a_key_updated_once_under_count_two_admission_keeps_its_initial_row(self):
        with Roles(SGD_JOB, servers=2) as job:
            model = KeyModel(init_bound=0.0, optimizer={"type": "sgd", "lr": 1.0}, admit="count:2")
            data, _ = key_data()
            trainer = pst.Trainer(model, data, scheduler=job.address)
            self.assertEqual([(t["name"], t["admit"]) for t in trainer.session.tables], [("user", "count:2")])
            batches, _, _ = first_step(self, trainer, model)
            # Every key of the first batch had its first update: dropped, so every row still reads 0.
            x, _ = next(batches)
            rows = model.emb(x)
            self.assertEqual(rows.abs().sum().item(), 0)
            last_step(self, trainer, model, batches, rows)

    def test_tables_of_a_model_must_be_the_jobs_when_the_job_declares_tables(self):
        config = os.path.join(tempfile.mkdtemp(), "job.textproto")
        with open(config, "w") as f:
            f.write('tables { name: "user" dim: 4 }\n')
        data, _ = key_data()
        # Room for a worker per attempt: the job never runs here.
        with Roles(["--model=external", "--workers=16", f"--config={config}"]) as job:
            cases = [
                (KeyModel("user", 3), "worker 0 declares table 'user' with dim 3; the job's table 'user' has dim 4"),
                (KeyModel("items", 4), r"declares table 'items'; the job has no such table \(its tables: user\)"),
                (KeyModel("user", 4, optimizer="sgd"), "declares table 'user' with optimizer {type: SGD"),
                (KeyModel("user", 4, init_bound=0.25), r"with init_bound 0.25; the job's table 'user' has 0.5 "
                                                       r"\(1/sqrt\(dim\)\)"),
                (KeyModel("user", 4, admit="count:2"), "declares table 'user' with admission count:2 .*; the job's "
                                                       "table 'user' has always"),
                (KeyModel("user", 4, admit="lru:3"), r"table 'user': admission: got 'lru:3', expected always, "
                                                     r"count:N \(N in \[1, 255\]\) or probability:P"),
                (KeyModel("user", 4, evict={"ttl_updates": 5}), r"declares table 'user' with eviction "
                                                                r"\{ttl_updates: 5 every_updates: 1\}; the job's "
                                                                r"table 'user' has \{\}"),
                (KeyModel("user", 4, evict={"ttl": 5}), r"table 'user': evict: unknown field 'ttl' \(expected "
                                                        r"ttl_updates, ttl_seconds, max_rows, order"),
                (KeyModel("user", 4, evict={"max_rows": 10, "keep_rows": 20}),
                 r"tables\[0\].eviction.max_rows: got 10, expected at least keep_rows = 20"),
                (KeyModel("user", 4, evict={"ttl_seconds": 60}),
                 r"tables\[0\].eviction.ttl_seconds: got 60, expected 0 in a SYNC job \(its clock is its steps"),
                (KeyModel("user", 4, row_dtype="bf16"), "declares table 'user' with row_dtype bf16; the job's "
                                                        "table 'user' has fp32"),
            ]
            with self.assertRaisesRegex(pstrain.InvalidArgumentError, r"Embedding 'user': row_dtype 'int8', expected "
                                                                      r"None \(the job's, --table_row_dtype\)"):
                KeyModel("user", 4, row_dtype="int8")
            for model, message in cases:
                with self.subTest(message=message):
                    with self.assertRaisesRegex(pstrain.InvalidArgumentError, message):
                        pst.Trainer(model, data, scheduler=job.address)
            # The job's own table, as the job declares it, is taken.
            member = pstrain.join(job.address)
            member.declare_model(["scale"], [[1]], np.ones(1, np.float32), len(data), 0,
                                 tables=[{"name": "user", "dim": 4, "init_bound": 0.5, "optimizer": None}])

    def test_evaluation_scores_give_the_job_a_test_auc(self):
        summary = None
        with Roles(["--model=external", "--workers=1", f"--batch_size={BATCH}", "--epochs=1"]) as job:
            data, keys = key_data()
            model = KeyModel()

            def evaluate(model, x, y):
                # Probabilities that rank the samples of label 1 (keys[:, 0] odd) above the others.
                p = (x[:, 0] % 2 == 1).float() * 0.8 + 0.1
                return 0.0, 0, p

            test = TensorDataset(keys, (keys[:, 0] % 2 == 1).float())
            trainer = pst.Trainer(model, data, test, scheduler=job.address, evaluate=evaluate, eval_batch=3)
            for x, _ in trainer:
                loss = model(x).mean()
                loss.backward()
                trainer.step(loss)
            for _ in range(100):
                if os.path.exists(job.summary):
                    with open(job.summary) as f:
                        summary = json.load(f)
                    break
                import time
                time.sleep(0.1)
        self.assertIsNotNone(summary)
        self.assertEqual(summary["final_test_auc"], 1.0)


class BindingsTest(unittest.TestCase):
    def test_score_histogram_counts_and_ranks(self):
        h = pstrain.ScoreHistogram()
        h.add(np.array([0.9, 0.2, 0.7, 0.1]), np.array([1, 0, 1, 0]))
        self.assertEqual((h.count, h.positives, h.negatives), (4, 2, 2))
        self.assertEqual(h.auc(), 1.0)
        with self.assertRaisesRegex(pstrain.InvalidArgumentError, "probability 1 is NaN"):
            h.add(np.array([0.5, float("nan")]), np.array([1, 0]))
        with self.assertRaisesRegex(pstrain.InvalidArgumentError, "2 probabilities and 3 labels"):
            h.add(np.array([0.5, 0.5]), np.array([1, 0, 1]))
        self.assertEqual(h.count, 4)  # nothing counted from the refused calls

    def test_ctr_reader_gives_the_records_of_a_range(self):
        path = os.path.join(tempfile.mkdtemp(), "train.tsv")
        dense = "\t".join(["1", "", "3"] + [""] * 10)
        cats = "\t".join(["68fd1e64", ""] + ["a"] * 24)
        with open(path, "w") as f:
            for label in (1, 0, 1):
                f.write(f"{label}\t{dense}\t{cats}\n")
        self.assertEqual(pstrain.count_records(path), 3)
        r = pstrain.CtrReader(path, "criteo").read(1, 5)  # clipped to the file
        np.testing.assert_array_equal(r["labels"], np.array([0, 1], np.float32))
        self.assertEqual(r["dense"].shape, (2, 13))
        self.assertAlmostEqual(float(r["dense"][0, 0]), float(np.log1p(1.0)), places=5)
        self.assertEqual(len(r["keys"]), 26)
        np.testing.assert_array_equal(r["offsets"][0], [0, 1, 2])
        self.assertEqual(r["keys"][0].dtype, np.uint64)
        self.assertEqual(r["keys"][0][0], r["keys"][0][1])  # the same value of the same field: the same key
        self.assertNotEqual(r["keys"][1][0], r["keys"][0][0])  # the missing value has a key of its own
        self.assertIsNone(r["weights"][0])
        with self.assertRaisesRegex(pstrain.Error, "no-such-file"):
            pstrain.CtrReader(path + "no-such-file")
        with self.assertRaisesRegex(pstrain.InvalidArgumentError, "'tsv'"):
            pstrain.CtrReader(path, "tsv")


if __name__ == "__main__":
    unittest.main()
