"""Click-through-rate prediction in PyTorch, trained as a worker of a pstrain job: the model of
pstrain's built-in --model=ctr (model/ctr_model.h), on the same files read the same way.

    one embedding table per categorical field ("C1".."C26" for Criteo, "features" for libsvm),
    each sample's bag summed (pstrain.torch.EmbeddingBag, mode "sum"), concatenated after the
    log-transformed dense features, then an MLP (256-128-1 by default) to one logit, trained with
    binary cross-entropy

The tables live on the parameter servers: a step pulls only the rows of its batch's keys (every
table's in one round trip, pstrain.torch.embedding_bags) and pushes one gradient row per distinct
key. Generate data and start the job and its workers:

    build/bin/pstrain-gen-ctr --out_dir=/tmp/ctr --train_samples=30000 --test_samples=4000 --unique_keys=20000
    build/bin/pstrain-launch --model=external --data_format=criteo --data_dir=/tmp/ctr --epochs=2 \\
        --worker_cmd="/usr/bin/python3 examples/pytorch/ctr.py"

Or on a data stream, files that keep arriving (pstrain-gen-ctr --stream_dir writes one; see
docs/guides/streams.md): each record is trained once, and scored before it is trained on, for the
job's progressive AUC and log loss per file:

    build/bin/pstrain-gen-ctr --stream_dir=/tmp/stream --hours=4 --records_per_hour=5000
    build/bin/pstrain-launch --model=external --data_stream=/tmp/stream \\
        --worker_cmd="/usr/bin/python3 examples/pytorch/ctr.py"

The job says where the data is (--data_dir or --data_stream, --data_format, --train_limit, --test_limit), the
tables' width (--embedding_dim, default 16), the MLP (--hidden) and how the servers update the
tables (--table_optimizer, --table_lr) and the MLP (--optimizer, --lr): the same flags, the same
model and the same data as --model=ctr. The run summary has the test AUC (final_test_auc).
"""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

import pstrain
import pstrain.torch as pst


class CtrNet(nn.Module):
    """[dense | sum of C1's rows | ... | sum of CF's rows] -> Linear/ReLU ... -> Linear -> logit."""

    def __init__(self, fields, num_dense, dim, hidden):
        super().__init__()
        self.bags = nn.ModuleList(
            pst.EmbeddingBag(name, dim, mode="sum", include_last_offset=True) for name in fields)
        sizes = [num_dense + len(fields) * dim, *hidden, 1]
        layers = []
        for i in range(len(sizes) - 1):
            linear = nn.Linear(sizes[i], sizes[i + 1])
            last = i == len(sizes) - 2
            # model/init.h's choice: He uniform before a ReLU, Glorot uniform for the logit, zero biases.
            fan_in, fan_out = sizes[i], sizes[i + 1]
            bound = (6.0 / (fan_in + fan_out)) ** 0.5 if last else (6.0 / fan_in) ** 0.5
            nn.init.uniform_(linear.weight, -bound, bound)
            nn.init.zeros_(linear.bias)
            layers.append(linear)
            if not last:
                layers.append(nn.ReLU())
        self.mlp = nn.Sequential(*layers)

    def forward(self, batch):
        # The same as [bag(keys, offsets, weights) for each field's bag], in one pull of rows.
        pooled = pst.embedding_bags(self.bags, batch.keys, batch.offsets, batch.weights)
        return self.mlp(torch.cat([batch.dense, *pooled], dim=1)).squeeze(1)


def evaluate(model, batch, labels):
    """(log loss sum, correct at p > 0.5, probabilities): the probabilities give the job its test AUC."""
    logits = model(batch)
    loss_sum = F.binary_cross_entropy_with_logits(logits, labels, reduction="sum").item()
    probabilities = torch.sigmoid(logits)
    correct = ((probabilities > 0.5) == (labels > 0.5)).sum().item()
    return loss_sum, correct, probabilities


def field_names(job, data_format):
    """The job's tables if it declares them (one per field, in order); else --model=ctr's names."""
    if job["tables"]:
        return [t["name"] for t in job["tables"]]
    return ["features"] if data_format == "libsvm" else [f"C{f + 1}" for f in range(26)]


def make_trainer(member, args):
    """The model and the Trainer of the job `member` joined, on the job's data."""
    job = member.job
    data_format = job["data_format"]
    if data_format not in ("criteo", "libsvm"):
        raise pstrain.InvalidArgumentError(
            f"the job's data format is '{data_format}': start it with --data_format=criteo (or libsvm) and "
            "--data_dir=<folder with train.tsv and test.tsv>")
    num_dense = 0 if data_format == "libsvm" else 13
    model = CtrNet(field_names(job, data_format), num_dense, job["embedding_dim"], job["hidden_sizes"])
    if job["data_stream"]:
        stream = pst.CtrStream(job["data_stream"], data_format, job["bad_records"])
        return model, pst.Trainer(model, stream, None, member=member)
    data_dir = args.data_dir or job["data_dir"]
    train = pst.CtrDataset(pstrain.find_ctr_file(data_dir, data_format, "train"), data_format, job["bad_records"],
                           job["train_limit"])
    test = pst.CtrDataset(pstrain.find_ctr_file(data_dir, data_format, "test"), data_format, job["bad_records"],
                          job["test_limit"])
    return model, pst.Trainer(model, train, test, member=member, evaluate=evaluate, eval_batch=args.eval_batch)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data_dir", default="", help="default: the job's --data_dir")
    parser.add_argument("--eval_batch", type=int, default=8192, help="test records per forward pass")
    args, _ = parser.parse_known_args()  # pstrain reads --scheduler itself

    torch.manual_seed(1)
    member = pstrain.join()  # first: the job says where the data is and what the model looks like
    try:
        model, trainer = make_trainer(member, args)
    except pstrain.Error as e:
        member.finish(e)  # the job fails now, with this reason, not at its start-up timeout
        raise
    for batch, labels in trainer:
        logits = model(batch)
        loss = F.binary_cross_entropy_with_logits(logits, labels)
        loss.backward()
        # The predictions before this step's update: the job's training AUC, and on a stream its
        # progressive validation.
        trainer.step(loss, scores=torch.sigmoid(logits.detach()))
    print(f"worker {trainer.rank}: done at epoch {trainer.epoch}{' (left the job)' if trainer.left else ''}")

if __name__ == "__main__":
    main()
