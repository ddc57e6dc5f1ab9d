"""The package without a job: the model file, the scheduler address, and errors of the bindings."""

import os
import tempfile
import unittest

import numpy as np

import pstrain
from pstrain.model_file import ModelFileError, parse_model_file, read_model_file, write_model_file


class ModelFileTest(unittest.TestCase):
    def test_round_trip_keeps_names_shapes_and_values(self):
        tensors = {"fc1.weight": np.arange(6, dtype=np.float32).reshape(2, 3), "fc1.bias": np.array([0.5, -1.0],
                                                                                                  np.float32)}
        path = os.path.join(tempfile.mkdtemp(), "m.bin")
        write_model_file(path, tensors)
        back = read_model_file(path)
        self.assertEqual(list(back), ["fc1.weight", "fc1.bias"])
        for name in tensors:
            np.testing.assert_array_equal(back[name], tensors[name])

    def test_damaged_file_is_refused_with_the_reason(self):
        path = os.path.join(tempfile.mkdtemp(), "m.bin")
        write_model_file(path, {"w": np.ones(4, np.float32)})
        data = bytearray(open(path, "rb").read())
        data[-6] ^= 0xFF
        with self.assertRaisesRegex(ModelFileError, "checksum mismatch"):
            parse_model_file(bytes(data), "m.bin")
        with self.assertRaisesRegex(ModelFileError, "not a pstrain model file"):
            parse_model_file(b"NOTAMODEL" * 4, "x")


class SchedulerAddressTest(unittest.TestCase):
    def test_flag_wins_over_environment(self):
        os.environ["PSTRAIN_SCHEDULER"] = "env:1"
        self.assertEqual(pstrain.scheduler_address(["--scheduler=flag:2"]), "flag:2")
        self.assertEqual(pstrain.scheduler_address(["--scheduler", "flag:3"]), "flag:3")
        self.assertEqual(pstrain.scheduler_address([]), "env:1")

    def test_none_is_a_clear_error(self):
        os.environ.pop("PSTRAIN_SCHEDULER", None)
        with self.assertRaisesRegex(pstrain.InvalidArgumentError, "PSTRAIN_SCHEDULER"):
            pstrain.scheduler_address([])

    def test_bad_address_is_a_value_error(self):
        with self.assertRaises(ValueError) as caught:
            pstrain.join("no-port-here")
        self.assertEqual(caught.exception.code, "INVALID_ARGUMENT")
        self.assertIn("expected host:port", str(caught.exception))


if __name__ == "__main__":
    unittest.main()
