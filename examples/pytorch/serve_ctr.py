"""Run a CTR model trained by pstrain in your own process: examples/pytorch/ctr.py's model, its dense
weights and its embedding rows from a model export (pstrain-export), or its rows from pstrain-serve
while the job still trains. Prints the model's log loss and accuracy on the test file.

    # train with checkpoints, then export the last cut (the model the workers declared is recorded
    # beside the checkpoints)
    build/bin/pstrain-launch --model=external --data_format=criteo --data_dir=/tmp/ctr --epochs=2 \\
        --checkpoint_dir=/tmp/ckpt --checkpoint_every_steps=20 --final_model=/tmp/ctr.bin \\
        --worker_cmd="/usr/bin/python3 examples/pytorch/ctr.py"
    build/bin/pstrain-export --checkpoint_dir=/tmp/ckpt --out=/tmp/ctr-export

    /usr/bin/python3 examples/pytorch/serve_ctr.py --export=/tmp/ctr-export --data_dir=/tmp/ctr
    # or the rows from a serving process (its --checkpoint_dir, or --export_dir=/tmp/ctr-export):
    /usr/bin/python3 examples/pytorch/serve_ctr.py --export=/tmp/ctr-export --data_dir=/tmp/ctr \\
        --serve=127.0.0.1:7100

With --serve the dense weights still come from the export and only the rows are looked up from the
serving process (TLS flags as a worker's: --tls_cert etc., or PSTRAIN_TLS_CERT, ...).
"""

import argparse
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import pstrain  # noqa: E402
import pstrain.torch as pst  # noqa: E402
from ctr import CtrNet  # noqa: E402


def evaluate(model, test, eval_batch=8192):
    """(mean log loss, accuracy) of `model` on the CtrDataset `test`."""
    loss, correct = 0.0, 0
    with torch.no_grad():
        for first in range(0, len(test), eval_batch):
            batch, labels = test.batch(range(first, min(first + eval_batch, len(test))))
            logits = model(batch)
            loss += F.binary_cross_entropy_with_logits(logits, labels, reduction="sum").item()
            correct += ((torch.sigmoid(logits) > 0.5) == (labels > 0.5)).sum().item()
    return loss / len(test), correct / len(test)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--export", required=True, help="a model export of ctr.py's job (pstrain-export)")
    parser.add_argument("--data_dir", required=True, help="the folder with test.tsv")
    parser.add_argument("--serve", default="", help="host:port of pstrain-serve: look the rows up there")
    args, _ = parser.parse_known_args()

    export = pstrain.read_export(args.export)
    fields = list(export["tables"])
    dim = export["tables"][fields[0]]["dim"]
    hidden = [export["dense"][f"mlp.{2 * i}.bias"].shape[0] for i in range(len(export["dense"]) // 2 - 1)]
    model = CtrNet(fields, 13, dim, hidden)
    pst.load_export(args.export, model)
    if args.serve:
        pst.serve_tables(model, pstrain.ServeClient(args.serve, **pstrain.security_options()))
    test = pst.CtrDataset(pstrain.find_ctr_file(args.data_dir, "criteo", "test"), "criteo")
    loss, accuracy = evaluate(model, test)
    source = f"rows from {args.serve}" if args.serve else "rows from the export"
    print(f"step {export['step']}, {source}: test log loss {loss:.6f}, accuracy {accuracy:.4f} "
          f"on {len(test)} records")


if __name__ == "__main__":
    main()
