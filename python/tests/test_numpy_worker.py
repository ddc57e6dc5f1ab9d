"""The core package without PyTorch: a NumPy softmax regression is a worker of a real job through
pstrain.join / Member / Session alone, and importing pstrain imports no torch."""

import subprocess
import sys
import unittest

import numpy as np

import pstrain
from local_job import PYTHON, Roles

N_TRAIN, N_TEST, FEATURES, CLASSES = 512, 128, 6, 3


def planted_data(n, seed):
    rng = np.random.default_rng(seed)
    w = np.random.default_rng(0).normal(size=(FEATURES, CLASSES)).astype(np.float32)
    x = rng.normal(size=(n, FEATURES)).astype(np.float32)
    y = np.argmax(x @ w, axis=1)
    return x, y


def softmax_loss_grad(w, b, x, y):
    logits = x @ w + b
    logits -= logits.max(axis=1, keepdims=True)
    p = np.exp(logits)
    p /= p.sum(axis=1, keepdims=True)
    loss = -np.log(p[np.arange(len(y)), y]).sum()
    d = p
    d[np.arange(len(y)), y] -= 1
    d /= len(y)
    return loss, x.T @ d, d.sum(axis=0), logits


class NumpyWorkerTest(unittest.TestCase):
    def test_import_needs_no_torch(self):
        code = "import sys, pstrain; print('torch' in sys.modules)"
        out = subprocess.run([PYTHON, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
        self.assertEqual(out, "False")

    def test_numpy_softmax_regression_trains_through_the_session(self):
        x_train, y_train = planted_data(N_TRAIN, 1)
        x_test, y_test = planted_data(N_TEST, 2)
        with Roles(["--model=external", "--workers=1", "--epochs=5", "--batch_size=32", "--optimizer=sgd",
                    "--lr=0.5", "--lr_schedule=constant"]) as job:
            member = pstrain.join(job.address)
            names, shapes = ["w", "b"], [[FEATURES, CLASSES], [CLASSES]]
            member.declare_model(names, shapes, np.zeros(FEATURES * CLASSES + CLASSES, np.float32), N_TRAIN, N_TEST)
            member.start()
            session = member.new_session(names, shapes)
            weights, grad = session.weights, session.gradient  # views of the session's buffers
            w = weights[:FEATURES * CLASSES].reshape(FEATURES, CLASSES)
            b = weights[FEATURES * CLASSES:]
            # Calls out of order are errors the script can catch, not a crash of the interpreter.
            with self.assertRaises(pstrain.FailedPreconditionError):
                session.begin_step()
            with self.assertRaises(pstrain.FailedPreconditionError):
                session.end_step(0.0)
            trained = 0
            while True:
                work = session.next()
                if work.kind == "done":
                    break
                if work.kind == "evaluate":
                    xs, ys = x_test[work.begin:work.end], y_test[work.begin:work.end]
                    loss, _, _, logits = softmax_loss_grad(w, b, xs, ys)
                    session.report_evaluation(float(loss), int((logits.argmax(axis=1) == ys).sum()), len(ys))
                    continue
                idx = np.asarray(work.samples)
                self.assertTrue(session.begin_step() in (True, False))
                loss, gw, gb, _ = softmax_loss_grad(w, b, x_train[idx], y_train[idx])
                grad[:FEATURES * CLASSES] = gw.reshape(-1)
                grad[FEATURES * CLASSES:] = gb
                session.gradient_ready(0, 2)
                if session.end_step(float(loss)):
                    trained += len(idx)
            self.assertEqual(member.finish(None), "")
            self.assertEqual(trained, N_TRAIN * 5)
            accuracy = float((np.argmax(x_test @ w + b, axis=1) == y_test).mean())
            self.assertGreater(accuracy, 0.85)


if __name__ == "__main__":
    unittest.main()
