#!/usr/bin/python3
"""Tests of pstrain-plot (ctest pstrain_plot_test): runs the installed script on the summaries in
testdata/ (real runs: the sync and async demo, a CTR job, a worker joining, failed jobs) and on bad
input, and checks the PNGs, the exit statuses and the messages; also checks the numbers the panels
are drawn from, through the module itself.

    pstrain_plot_test.py PATH_OF_PSTRAIN_PLOT

Exit status 77 (skipped) where matplotlib cannot be imported.
"""

import importlib.util
import os
import struct
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
TESTDATA = os.path.join(HERE, "testdata")
PLOT = None  # set from argv in __main__
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def fixture(name):
    return os.path.join(TESTDATA, name)


def png_size(path):
    """(width, height) from the PNG's IHDR chunk; fails the test if the file is not a PNG."""
    with open(path, "rb") as f:
        head = f.read(24)
    if head[:8] != PNG_SIGNATURE or head[12:16] != b"IHDR":
        raise AssertionError(f"{path} is not a PNG (starts {head[:16]!r})")
    return struct.unpack(">II", head[16:24])


class PlotTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.out = os.path.join(self.tmp.name, "out.png")

    def tearDown(self):
        self.tmp.cleanup()

    def run_plot(self, *args):
        return subprocess.run([PLOT, *args], capture_output=True, text=True, timeout=60)

    def assert_png(self, path):
        width, height = png_size(path)
        self.assertEqual((width, height), (1500, 850))
        size = os.path.getsize(path)
        self.assertGreater(size, 30_000, "a figure of six panels with data is not this small")
        self.assertLess(size, 1_000_000)

    def test_one_summary_writes_a_png(self):
        result = self.run_plot(fixture("sync.json"), "-o", self.out)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(result.stderr, "")
        self.assert_png(self.out)

    def test_two_summaries_overlaid_with_labels(self):
        result = self.run_plot(fixture("sync.json"), fixture("async.json"), "--label", "sync", "--label",
                               "async", "--title", "sync against async", "-o", self.out)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assert_png(self.out)

    def test_ctr_churn_and_failed_jobs_plot(self):
        result = self.run_plot(fixture("ctr.json"), fixture("churn.json"), fixture("failed.json"), "-o", self.out)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assert_png(self.out)

    def test_a_job_without_epochs_is_skipped_with_a_reason(self):
        result = self.run_plot(fixture("sync.json"), fixture("failed-no-epochs.json"), "-o", self.out)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("failed-no-epochs: no epochs to plot; the job is FAILED (worker 0:", result.stderr)
        self.assert_png(self.out)

    def test_nothing_to_plot(self):
        result = self.run_plot(fixture("failed-no-epochs.json"), "-o", self.out)
        self.assertEqual(result.returncode, 1)
        self.assertIn("nothing to plot", result.stderr)
        self.assertFalse(os.path.exists(self.out))

    def test_missing_file(self):
        missing = os.path.join(self.tmp.name, "missing.json")
        result = self.run_plot(missing, "-o", self.out)
        self.assertEqual(result.returncode, 1)
        self.assertIn(f"pstrain-plot: {missing}: cannot read: No such file or directory", result.stderr)

    def test_not_json(self):
        path = self.write("bad.json", "{\"state\": \"FINISHED\",\n oops")
        result = self.run_plot(path, "-o", self.out)
        self.assertEqual(result.returncode, 1)
        self.assertIn(f"pstrain-plot: {path}: not JSON: ", result.stderr)
        self.assertIn("line 2", result.stderr)

    def test_json_that_is_not_a_summary_names_the_missing_field(self):
        path = self.write("other.json", '{"state": "FINISHED", "loss": 1}')
        result = self.run_plot(path, "-o", self.out)
        self.assertEqual(result.returncode, 1)
        self.assertIn(f"pstrain-plot: {path}: not a pstrain run summary: no field 'epochs'", result.stderr)
        path = self.write("list.json", "[1, 2]")
        result = self.run_plot(path, "-o", self.out)
        self.assertIn(f"{path}: not a pstrain run summary: expected a JSON object, got list", result.stderr)

    def test_an_epoch_without_a_field_is_named(self):
        path = self.write("epoch.json", '{"state": "FINISHED", "epochs": [{"epoch": 0, "train_loss": 1, '
                                        '"test_loss": null, "test_accuracy": null, "seconds": 1}]}')
        result = self.run_plot(path, "-o", self.out)
        self.assertEqual(result.returncode, 1)
        self.assertIn(f"{path}: not a pstrain run summary: epochs[0]: no field 'samples'", result.stderr)

    def test_no_output_is_a_usage_error(self):
        result = self.run_plot(fixture("sync.json"))
        self.assertEqual(result.returncode, 2)
        self.assertIn("-o/--output", result.stderr)

    def test_labels_must_match_the_summaries(self):
        result = self.run_plot(fixture("sync.json"), fixture("async.json"), "--label", "one", "-o", self.out)
        self.assertEqual(result.returncode, 2)
        self.assertIn("1 --label for 2 summaries", result.stderr)

    def test_unwritable_output(self):
        out = os.path.join(self.tmp.name, "no-such-dir", "out.png")
        result = self.run_plot(fixture("sync.json"), "-o", out)
        self.assertEqual(result.returncode, 1)
        self.assertIn(f"pstrain-plot: cannot write {out}: No such file or directory", result.stderr)

    def write(self, name, text):
        path = os.path.join(self.tmp.name, name)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        return path


class ReadingTest(unittest.TestCase):
    """The numbers the panels draw, read by the module the script was installed from."""

    @classmethod
    def setUpClass(cls):
        spec = importlib.util.spec_from_file_location("pstrain_plot", os.path.join(HERE, "pstrain_plot.py"))
        cls.plot = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(cls.plot)

    def test_throughput_is_samples_over_seconds_of_complete_epochs(self):
        run = self.plot.load_run(fixture("sync.json"), "sync")
        self.assertEqual([e.number for e in run.epochs], list(range(10)))
        first = run.epochs[0]
        self.assertAlmostEqual(first.samples_per_second(), first.samples / first.seconds)
        self.assertGreater(first.samples_per_second(), 1000)
        failed = self.plot.load_run(fixture("failed.json"), "failed")
        self.assertFalse(failed.epochs[0].complete)
        self.assertNotEqual(failed.epochs[0].samples_per_second(), failed.epochs[0].samples_per_second())  # NaN

    def test_auc_only_where_reported(self):
        self.assertTrue(self.plot.load_run(fixture("ctr.json"), "ctr").has_auc)
        self.assertFalse(self.plot.load_run(fixture("sync.json"), "sync").has_auc)

    def test_step_split_and_events(self):
        run = self.plot.load_run(fixture("churn.json"), "churn")
        self.assertEqual(sorted(run.epochs[0].step_ms), ["compute", "pull", "push", "wait"])
        self.assertEqual([(e["kind"], e["rank"]) for e in run.events], [("joined", 2)])
        self.assertEqual([rank for rank, _ in run.worker_samples], [0, 1, 2])

    def test_default_labels_tell_files_apart(self):
        self.assertEqual(self.plot.default_labels(["a/run1/summary.json", "b/run2/summary.json"]),
                         ["run1/summary", "run2/summary"])
        self.assertEqual(self.plot.default_labels(["sync.json", "x/async.json"]), ["sync", "async"])


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit("usage: pstrain_plot_test.py PATH_OF_PSTRAIN_PLOT")
    PLOT = sys.argv.pop(1)
    try:
        import matplotlib  # noqa: F401
    except ImportError as e:
        print(f"pstrain_plot_test: SKIPPED: matplotlib cannot be imported ({e})")
        sys.exit(77)
    unittest.main(verbosity=2)
