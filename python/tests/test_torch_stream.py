"""examples/pytorch/ctr.py on a data stream (pstrain-launch --model=external --data_stream, 2 servers
x 2 workers) while pstrain-gen-ctr writes the stream's files at a rate: PyTorch workers train each
record once, wait for the files still to come, and score each prediction before its update (the
job's progressive AUC per file). In SYNC the final model equals, byte for byte, a one-epoch file job
of the same script over the same records in one training file; in ASYNC every record counts once."""

import os
import shutil
import subprocess
import tempfile
import unittest

from local_job import binary, example, launch

HOURS, PER_HOUR = 3, 2000
RECORDS = HOURS * PER_HOUR
# Small tables and MLP, a constant rate (a stream's default schedule) for the file job as well.
MODEL = ["--model=external", "--servers=2", "--workers=2", "--batch_size=128", "--seed=5", "--embedding_dim=8",
         "--hidden=32,16", "--lr_schedule=constant"]


def generator(stream_dir, rate):
    """pstrain-gen-ctr writing the stream: the same records for the same flags, whatever the rate."""
    return [binary("pstrain-gen-ctr"), f"--stream_dir={stream_dir}", f"--hours={HOURS}",
            f"--records_per_hour={PER_HOUR}", "--new_key_rate=0.2", "--unique_keys=20000", "--seed=7",
            f"--rate={rate}"]


def read(path):
    with open(path, "rb") as f:
        return f.read()


class TorchStreamJobTest(unittest.TestCase):
    def stream_job(self, mode, work):
        """Runs ctr.py on a stream written while it trains; returns (summary, final model path, stream dir)."""
        stream = os.path.join(work, "stream")
        os.makedirs(stream)
        model = os.path.join(work, "model.bin")
        # About 6 s of writing: the workers start before the last file is ready and wait for it.
        with open(os.path.join(work, "gen.log"), "w") as log:
            writer = subprocess.Popen(generator(stream, 1000), stdout=log, stderr=subprocess.STDOUT)
            try:
                code, output, summary = launch(
                    [*MODEL, f"--mode={mode}", f"--data_stream={stream}", f"--final_model={model}"],
                    example("ctr.py"), timeout=240)
            finally:
                writer.wait(timeout=60)
        self.assertEqual(writer.returncode, 0)
        self.assertEqual(code, 0, output[-3000:])
        self.assertEqual(summary["state"], "FINISHED", output[-3000:])
        return summary, model, stream, output

    def assert_every_record_once(self, summary, output):
        self.assertEqual([e["samples"] for e in summary["epochs"]], [RECORDS], output[-2000:])
        files = summary["stream"]["progressive"]
        self.assertEqual([f["file"] for f in files], [f"part-{h:05d}.tsv" for h in range(HOURS)], files)
        # Each record scored once, before the update it led to.
        self.assertEqual([f["samples"] for f in files], [PER_HOUR] * HOURS, files)
        self.assertTrue(all(f["closed"] and 0.5 < f["auc"] < 1 for f in files), files)
        self.assertEqual(summary["stream"]["trained_records"], RECORDS)

    def test_sync_stream_equals_a_file_job_of_the_same_records(self):
        work = tempfile.mkdtemp(prefix="pstrain-torch-stream-")
        summary, model, stream, output = self.stream_job("sync", work)
        self.assert_every_record_once(summary, output)
        self.assertIn("caught up", output)  # the workers waited for files still to come

        # The same records as one training file (a test file is needed; evaluation changes nothing).
        data = os.path.join(work, "data")
        os.makedirs(data)
        with open(os.path.join(data, "train.tsv"), "wb") as train:
            for h in range(HOURS):
                train.write(read(os.path.join(stream, f"part-{h:05d}.tsv")))
        shutil.copy(os.path.join(stream, "part-00000.tsv"), os.path.join(data, "test.tsv"))
        file_model = os.path.join(work, "file-model.bin")
        code, file_output, file_summary = launch(
            [*MODEL, "--mode=sync", "--epochs=1", "--data_format=criteo", f"--data_dir={data}",
             f"--final_model={file_model}", "--eval_last_epoch_only"], example("ctr.py"), timeout=240)
        self.assertEqual(code, 0, file_output[-3000:])
        self.assertEqual(file_summary["epochs"][0]["samples"], RECORDS)
        self.assertEqual(read(model), read(file_model), "the stream's model differs from the file job's")

    def test_async_stream_counts_every_record_once(self):
        work = tempfile.mkdtemp(prefix="pstrain-torch-stream-async-")
        summary, _, _, output = self.stream_job("async", work)
        self.assert_every_record_once(summary, output)


if __name__ == "__main__":
    unittest.main()
