"""pstrain.torch.Embedding and EmbeddingBag without a job: over a session stand-in that holds rows
in memory, their forward and backward equal torch.nn.Embedding / EmbeddingBag over the same rows
(de-duplicated keys, repeated keys' gradients summed, sum / mean / max, per-sample weights), and
bad input gets a pstrain error naming the module and the cause."""

import unittest

import numpy as np
import torch
import torch.nn.functional as F

import pstrain
import pstrain.torch as pst
from pstrain._torch_tables import _TableBinding


class MemorySession:
    """What the modules use of a pstrain._core.Session, with rows drawn per key on first sight."""

    def __init__(self, tables):
        self.tables = tables
        self.keys = {}
        self.buffers = {}
        self.grads = {}
        self.pulls = []
        self.calls = 0
        self.gen = np.random.default_rng(7)
        self.store = {}

    def row_of(self, table, key):
        dim = self.tables[table]["dim"]
        return self.store.setdefault((table, int(key)), self.gen.standard_normal(dim).astype(np.float32))

    def pull_rows(self, keys, tables):
        self.calls += 1
        for k, t in zip(keys, tables):
            k = np.asarray(k).view(np.uint64)
            assert np.all(k[1:] > k[:-1]), "keys must be strictly ascending as uint64"
            self.pulls.append((t, k.copy()))
            self.keys[t] = k.copy()
            dim = self.tables[t]["dim"]
            self.buffers[t] = np.stack([self.row_of(t, key) for key in k]) if len(k) else np.zeros((0, dim), np.float32)
            self.grads[t] = np.zeros_like(self.buffers[t])

    def rows(self, t):
        return self.buffers[t]

    def row_gradient(self, t):
        return self.grads[t]


def bind(*modules):
    tables = [{"name": m.table, "dim": m.dim} for m in modules]
    session = MemorySession(tables)
    binding = _TableBinding(session, [("", m) for m in modules], torch.device("cpu"))
    return session, binding


def dense_weight(session, table, keys):
    """torch's view of the same table: a weight with one row per distinct key, and the keys as
    indices into it."""
    distinct = sorted(set(int(k) for k in np.asarray(keys).reshape(-1).view(np.uint64)))
    weight = torch.tensor(np.stack([session.row_of(table, k) for k in distinct]), requires_grad=True)
    position = {k: i for i, k in enumerate(distinct)}
    index = torch.tensor([position[int(k)] for k in np.asarray(keys).reshape(-1).view(np.uint64)]).reshape(keys.shape)
    return weight, index, distinct


class EmbeddingModulesTest(unittest.TestCase):
    def test_embedding_matches_torch_and_sums_the_gradients_of_repeated_keys(self):
        emb = pst.Embedding("user", 4)
        session, binding = bind(emb)
        # Keys above 2^63 arrive as negative int64s; they sort after the others as uint64.
        keys = torch.tensor([[7, -1, 7], [3, 7, -5]], dtype=torch.int64)
        binding.begin_step()
        out = emb(keys)
        table, pulled = session.pulls[-1]
        self.assertEqual(table, 0)
        np.testing.assert_array_equal(pulled, np.array([3, 7, 2**64 - 5, 2**64 - 1], np.uint64))
        weight, index, _ = dense_weight(session, 0, keys.numpy())
        expected = F.embedding(index, weight)
        torch.testing.assert_close(out, expected)
        upstream = torch.arange(out.numel(), dtype=torch.float32).reshape(out.shape)
        (out * upstream).sum().backward()
        (expected * upstream).sum().backward()
        np.testing.assert_allclose(session.row_gradient(0), weight.grad.numpy(), rtol=1e-6)
        # Key 7 appears three times: its row's gradient is the sum of the three.
        self.assertTrue(np.allclose(session.row_gradient(0)[1], upstream[0, 0] + upstream[0, 2] + upstream[1, 1]))

    def test_embedding_bag_matches_torch_in_every_mode(self):
        keys = torch.tensor([5, 9, 5, 2, 9, 9, 11], dtype=torch.int64)
        offsets = torch.tensor([0, 3, 3, 5], dtype=torch.int64)  # bag 1 is empty
        weights = torch.tensor([0.5, 2.0, 1.0, -1.0, 3.0, 0.25, 1.5])
        for mode, psw in (("sum", None), ("sum", weights), ("mean", None), ("max", None)):
            with self.subTest(mode=mode, weighted=psw is not None):
                bag = pst.EmbeddingBag("item", 3, mode=mode)
                session, binding = bind(bag)
                binding.begin_step()
                out = bag(keys, offsets, psw)
                weight, index, _ = dense_weight(session, 0, keys.numpy())
                expected = F.embedding_bag(index, weight, offsets, mode=mode, per_sample_weights=psw)
                torch.testing.assert_close(out, expected)
                out.square().sum().backward()
                expected.square().sum().backward()
                np.testing.assert_allclose(session.row_gradient(0), weight.grad.numpy(), rtol=1e-5, atol=1e-6)

    def test_embedding_bag_takes_fixed_bags_and_csr_offsets(self):
        bag = pst.EmbeddingBag("item", 2, mode="sum")
        session, binding = bind(bag)
        binding.begin_step()
        out = bag(torch.tensor([[1, 2], [2, 2]]))
        weight, index, _ = dense_weight(session, 0, np.array([[1, 2], [2, 2]]))
        torch.testing.assert_close(out, F.embedding_bag(index, weight, mode="sum"))
        csr = pst.EmbeddingBag("other", 2, mode="mean", include_last_offset=True)
        session, binding = bind(csr)
        out = csr(torch.tensor([4, 6, 8]), torch.tensor([0, 1, 3]))
        self.assertEqual(tuple(out.shape), (2, 2))

    def test_embedding_bags_pulls_every_table_at_once_and_matches_each_bag(self):
        bags = [pst.EmbeddingBag(f"C{f}", 2, mode="sum", include_last_offset=True) for f in range(3)]
        session, binding = bind(*bags)
        keys = [torch.tensor([4, 4, 8]), torch.tensor([1]), torch.tensor([], dtype=torch.int64)]
        offsets = [torch.tensor([0, 2, 3]), torch.tensor([0, 0, 1]), torch.tensor([0, 0, 0])]
        weights = [torch.tensor([1.0, 2.0, 0.5]), None, None]
        binding.begin_step()
        together = pst.embedding_bags(bags, keys, offsets, weights)
        self.assertEqual(session.calls, 1)
        self.assertEqual(sorted(t for t, _ in session.pulls), [0, 1, 2])
        sum(out.square().sum() for out in together).backward()
        together_grads = [session.row_gradient(t).copy() for t in range(3)]
        binding.begin_step()
        one_by_one = [bag(k, o, w) for bag, k, o, w in zip(bags, keys, offsets, weights)]
        self.assertEqual(session.calls, 4)
        for a, b in zip(together, one_by_one):
            torch.testing.assert_close(a, b)
        sum(out.square().sum() for out in one_by_one).backward()
        for t in range(3):
            np.testing.assert_array_equal(session.row_gradient(t), together_grads[t])
        with self.assertRaisesRegex(pstrain.InvalidArgumentError, "3 bags, 2 key lists"):
            pst.embedding_bags(bags, keys[:2])
        binding.end_step()
        with self.assertRaisesRegex(pstrain.FailedPreconditionError, "'C0' was looked up twice in one call"):
            pst.embedding_bags([bags[0], bags[0]], keys[:1] * 2, offsets[:1] * 2)

    def test_a_table_is_looked_up_once_per_training_step_and_any_number_of_times_in_evaluation(self):
        emb = pst.Embedding("user", 2)
        _, binding = bind(emb)
        binding.begin_step()
        emb(torch.tensor([1]))
        with self.assertRaisesRegex(pstrain.FailedPreconditionError, "'user' was looked up twice in one training"):
            emb(torch.tensor([2]))
        binding.end_step()
        with torch.no_grad():
            emb(torch.tensor([1]))
            emb(torch.tensor([2]))

    def test_no_keys_gives_empty_bags(self):
        bag = pst.EmbeddingBag("item", 3, mode="sum")
        _, binding = bind(bag)
        out = bag(torch.zeros(0, dtype=torch.int64), torch.zeros(4, dtype=torch.int64))
        self.assertEqual(tuple(out.shape), (4, 3))
        self.assertEqual(out.abs().sum().item(), 0)

    def test_bad_input_names_the_module_and_the_cause(self):
        bag = pst.EmbeddingBag("C1", 4, mode="mean")
        with self.assertRaisesRegex(pstrain.FailedPreconditionError, "EmbeddingBag 'C1' is not bound to a job"):
            bag(torch.tensor([1, 2]), torch.tensor([0]))
        bind(bag)
        cases = [
            ((torch.tensor([1.0, 2.0]), torch.tensor([0])), "keys are torch.float32, expected torch.int64"),
            ((np.array([1, 2], np.int32), torch.tensor([0])), "NumPy int32 array, expected uint64 or int64"),
            (([1, 2], torch.tensor([0])), "keys are a list"),
            ((torch.tensor([1, 2]),), "1-D keys without offsets, expected 2-D"),
            ((torch.tensor([1, 2]), torch.tensor([0.0])), "offsets are 1-D torch.float32"),
            ((torch.tensor([1, 2]), torch.tensor([0]), torch.ones(2)), "per_sample_weights need mode 'sum'"),
        ]
        for args, message in cases:
            with self.subTest(message=message):
                with self.assertRaisesRegex(pstrain.InvalidArgumentError, message):
                    bag(*args)
        summed = pst.EmbeddingBag("C2", 4, mode="sum")
        bind(summed)
        with self.assertRaisesRegex(pstrain.InvalidArgumentError, r"per_sample_weights are torch.int64 \[2\]"):
            summed(torch.tensor([1, 2]), torch.tensor([0]), torch.tensor([1, 2]))
        for kwargs, message in (({"mode": "median"}, "mode 'median'"), ({"optimizer": 3}, "optimizer 3")):
            with self.assertRaisesRegex(pstrain.InvalidArgumentError, message):
                pst.EmbeddingBag("C3", 4, **kwargs)
        with self.assertRaisesRegex(pstrain.InvalidArgumentError, "dim 0, expected an int >= 1"):
            pst.Embedding("C4", 0)

    def test_a_table_belongs_to_one_module(self):
        model = torch.nn.ModuleDict({"a": pst.Embedding("user", 4), "b": pst.EmbeddingBag("user", 4)})
        with self.assertRaisesRegex(pstrain.InvalidArgumentError, "modules 'a' and 'b' both look up table 'user'"):
            pst.Trainer._table_modules(model)

    def test_binding_refuses_a_table_the_job_lacks_or_of_another_dim(self):
        session = MemorySession([{"name": "C1", "dim": 16}, {"name": "C2", "dim": 16}])
        with self.assertRaisesRegex(pstrain.InvalidArgumentError,
                                    r"looks up table 'C9'; the job has no such table \(its tables: C1, C2\)"):
            _TableBinding(session, [("bags.8", pst.EmbeddingBag("C9", 16))], torch.device("cpu"))
        with self.assertRaisesRegex(pstrain.InvalidArgumentError, "has dim 8; the job's table 'C2' has dim 16"):
            _TableBinding(session, [("bags.1", pst.EmbeddingBag("C2", 8))], torch.device("cpu"))


class UniqueKeysTest(unittest.TestCase):
    def test_distinct_keys_ascend_as_uint64_and_the_index_maps_every_key(self):
        keys = np.array([[9, -2, 9], [0, -2, 4]], np.int64)
        distinct, index = pstrain.unique_keys(keys)
        np.testing.assert_array_equal(distinct, np.array([0, 4, 9, 2**64 - 2], np.uint64))
        self.assertEqual(index.shape, keys.shape)
        np.testing.assert_array_equal(distinct[index], keys.view(np.uint64))
        with self.assertRaisesRegex(pstrain.InvalidArgumentError, "dtype float64, expected uint64 or int64"):
            pstrain.unique_keys(np.zeros(3))


if __name__ == "__main__":
    unittest.main()
