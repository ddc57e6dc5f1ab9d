#!/usr/bin/python3
"""pstrain-plot: draws pstrain run summaries (--summary_json) as one PNG figure.

    pstrain-plot SUMMARY.json [SUMMARY.json ...] -o OUT.png [--label NAME ...] [--title TEXT]

Six panels, one color per summary, so several runs overlay for comparison:
  loss           train (solid) and test (dashed) loss per epoch;
  test metrics   test accuracy (solid) and, for jobs that report scores (CTR), test AUC (dotted);
  step time      each epoch's mean step split into compute, push, wait and pull (stacked bars, one
                 bar per summary, told apart by hatching);
  throughput     training samples per second of each complete epoch (samples / seconds);
  workers        training samples per worker rank;
  membership     workers and servers joining, leaving or dying, on the scheduler's clock, with the
                 end of each run.
Epochs that never completed (a failed job) still show their train loss and step times.

Reads Debian's python3-matplotlib with the Agg backend: no display is needed. The summary's layout
is written by scheduler/progress.cc (Progress::SummaryJson) and described in
docs/reference/run-summary.md.

Exit status: 0 the PNG was written; 1 an input is missing, not JSON or not a run summary, nothing
is left to plot, or the PNG cannot be written (each with a message on stderr naming the file and
what is wrong); 2 a bad command line.
"""

import argparse
import json
import math
import os
import sys
from dataclasses import dataclass, field
from typing import List, Optional

STEP_PARTS = ("compute", "push", "wait", "pull")
EVENT_MARKERS = {"joined": "^", "left": "v", "died": "x"}


class InputError(Exception):
    """A summary that cannot be plotted; the message names the file and what is wrong."""


# --- reading summaries ---


@dataclass
class Epoch:
    number: int
    complete: bool
    train_loss: float  # NaN where the summary has null
    test_loss: float
    test_accuracy: float
    test_auc: float
    samples: int
    seconds: float
    step_ms: Optional[dict]  # STEP_PARTS -> mean milliseconds per step; None if not reported

    def samples_per_second(self) -> float:
        """NaN for an epoch that did not complete: its seconds are not its duration."""
        if not self.complete or not self.seconds > 0:
            return math.nan
        return self.samples / self.seconds


@dataclass
class Run:
    label: str
    state: str
    failure: Optional[str]
    mode: str
    epochs: List[Epoch]
    worker_samples: List[tuple]  # (rank, samples)
    events: List[dict]  # {"seconds", "role", "rank", "kind"}
    wall_seconds: float
    final_accuracy: float
    final_auc: float = math.nan
    has_auc: bool = field(default=False)


def _number(value, where: str) -> float:
    if value is None:
        return math.nan
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InputError(f"{where}: expected a number or null, got {json.dumps(value)}")
    return float(value)


def _require(obj: dict, name: str, where: str):
    if name not in obj:
        raise InputError(f"{where}: no field '{name}'")
    return obj[name]


def _epoch(obj, where: str) -> Epoch:
    if not isinstance(obj, dict):
        raise InputError(f"{where}: expected an object")
    step = obj.get("step_time_ms")
    step_ms = None
    if isinstance(step, dict):
        step_ms = {part: _number(step.get(part), f"{where}.step_time_ms.{part}") for part in STEP_PARTS}
    return Epoch(
        number=int(_number(_require(obj, "epoch", where), f"{where}.epoch")),
        complete=bool(obj.get("complete", True)),
        train_loss=_number(_require(obj, "train_loss", where), f"{where}.train_loss"),
        test_loss=_number(_require(obj, "test_loss", where), f"{where}.test_loss"),
        test_accuracy=_number(_require(obj, "test_accuracy", where), f"{where}.test_accuracy"),
        test_auc=_number(obj.get("test_auc"), f"{where}.test_auc"),
        samples=int(_number(_require(obj, "samples", where), f"{where}.samples")),
        seconds=_number(_require(obj, "seconds", where), f"{where}.seconds"),
        step_ms=step_ms,
    )


def load_run(path: str, label: str) -> Run:
    """Reads the summary at `path`; raises InputError saying what makes it unusable."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise InputError(f"{path}: cannot read: {e.strerror}") from None
    except UnicodeDecodeError:
        raise InputError(f"{path}: not JSON (not UTF-8 text)") from None
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as e:
        raise InputError(f"{path}: not JSON: {e.msg} at line {e.lineno} column {e.colno}") from None
    where = f"{path}: not a pstrain run summary"
    if not isinstance(obj, dict):
        raise InputError(f"{where}: expected a JSON object, got {type(obj).__name__}")
    state = _require(obj, "state", where)
    epochs = _require(obj, "epochs", where)
    if not isinstance(epochs, list):
        raise InputError(f"{where}: 'epochs' is not a list")
    runs_epochs = sorted((_epoch(e, f"{where}: epochs[{i}]") for i, e in enumerate(epochs)),
                         key=lambda e: e.number)
    workers = [(int(w.get("rank", i)), int(_number(w.get("samples"), f"{where}: workers[{i}].samples")))
               for i, w in enumerate(obj.get("workers") or []) if isinstance(w, dict)]
    events = [e for e in obj.get("membership_events") or [] if isinstance(e, dict) and "seconds" in e]
    return Run(
        label=label,
        state=str(state),
        failure=obj.get("failure"),
        mode=str(obj.get("mode", "?")),
        epochs=runs_epochs,
        worker_samples=workers,
        events=events,
        wall_seconds=_number(obj.get("wall_seconds"), f"{where}: wall_seconds"),
        final_accuracy=_number(obj.get("final_test_accuracy"), f"{where}: final_test_accuracy"),
        final_auc=_number(obj.get("final_test_auc"), f"{where}: final_test_auc"),
        has_auc=any(not math.isnan(e.test_auc) for e in runs_epochs),
    )


def default_labels(paths: List[str]) -> List[str]:
    """Each file's name without .json, with as many of its folders as tell the files apart
    (run1/summary and run2/summary)."""
    parts = [os.path.normpath(os.path.splitext(p)[0]).split(os.sep) for p in paths]
    for depth in range(1, max(len(p) for p in parts) + 1):
        labels = ["/".join(p[-depth:]) for p in parts]
        if len(set(labels)) == len(labels):
            return labels
    return list(paths)  # the same file twice


# --- drawing ---


def _draw_losses(ax, runs):
    for i, run in enumerate(runs):
        x = [e.number for e in run.epochs]
        ax.plot(x, [e.train_loss for e in run.epochs], "-o", color=f"C{i}", ms=3, label=f"{run.label} train")
        ax.plot(x, [e.test_loss for e in run.epochs], "--s", color=f"C{i}", ms=3, label=f"{run.label} test")
    ax.set(title="Loss", xlabel="epoch", ylabel="mean loss")
    ax.legend(fontsize="small")


def _draw_test_metrics(ax, runs):
    for i, run in enumerate(runs):
        x = [e.number for e in run.epochs]
        ax.plot(x, [e.test_accuracy for e in run.epochs], "-o", color=f"C{i}", ms=3,
                label=f"{run.label} accuracy")
        if run.has_auc:
            ax.plot(x, [e.test_auc for e in run.epochs], ":D", color=f"C{i}", ms=3, label=f"{run.label} AUC")
    has_auc = any(r.has_auc for r in runs)
    ax.set(title="Test accuracy and AUC" if has_auc else "Test accuracy", xlabel="epoch",
           ylabel="accuracy / AUC" if has_auc else "accuracy")
    ax.legend(fontsize="small")


def _draw_step_times(ax, runs):
    import matplotlib.patches as mpatches

    part_colors = dict(zip(STEP_PARTS, ("#4c72b0", "#dd8452", "#c44e52", "#55a868")))
    hatches = ("", "//", "..", "xx", "\\\\", "++")
    width = 0.8 / len(runs)
    drawn = False
    for i, run in enumerate(runs):
        epochs = [e for e in run.epochs if e.step_ms is not None]
        x = [e.number - 0.4 + width * (i + 0.5) for e in epochs]
        bottom = [0.0] * len(epochs)
        for part in STEP_PARTS:
            heights = [0.0 if math.isnan(e.step_ms[part]) else e.step_ms[part] for e in epochs]
            ax.bar(x, heights, width, bottom=bottom, color=part_colors[part], hatch=hatches[i % len(hatches)],
                   edgecolor="white", linewidth=0.5)
            bottom = [b + h for b, h in zip(bottom, heights)]
        drawn = drawn or bool(epochs)
    handles = [mpatches.Patch(color=c, label=p) for p, c in part_colors.items()]
    if len(runs) > 1:
        handles += [mpatches.Patch(facecolor="lightgrey", hatch=hatches[i % len(hatches)], label=r.label)
                    for i, r in enumerate(runs)]
    # Headroom above the bars for the legend.
    ax.set_ylim(0, ax.get_ylim()[1] * (1.3 + 0.08 * len(runs)))
    ax.legend(handles=handles, fontsize="small", ncol=2, loc="upper left")
    ax.set(title="Step time (mean per step)", xlabel="epoch", ylabel="ms")
    if not drawn:
        _say_empty(ax, "no step times in the summaries")


def _draw_throughput(ax, runs):
    for i, run in enumerate(runs):
        ax.plot([e.number for e in run.epochs], [e.samples_per_second() for e in run.epochs], "-o",
                color=f"C{i}", ms=3, label=run.label)
    ax.set(title="Throughput", xlabel="epoch", ylabel="training samples/s")
    ax.set_ylim(bottom=0)
    ax.legend(fontsize="small")


def _draw_worker_samples(ax, runs):
    width = 0.8 / len(runs)
    for i, run in enumerate(runs):
        ax.bar([rank - 0.4 + width * (i + 0.5) for rank, _ in run.worker_samples],
               [samples for _, samples in run.worker_samples], width, color=f"C{i}", label=run.label)
    ax.set(title="Samples per worker", xlabel="worker rank", ylabel="training samples")
    ranks = sorted({rank for run in runs for rank, _ in run.worker_samples})
    ax.set_xticks(ranks)
    ax.legend(fontsize="small")


def _draw_membership(ax, runs):
    rows = sorted({(e.get("role", "?"), e.get("rank", -1)) for run in runs for e in run.events})
    row_of = {row: y for y, row in enumerate(rows)}
    for i, run in enumerate(runs):
        for kind, marker in EVENT_MARKERS.items():
            mine = [e for e in run.events if e.get("kind") == kind]
            ax.scatter([e["seconds"] for e in mine], [row_of[(e.get("role", "?"), e.get("rank", -1))] for e in mine],
                       marker=marker, color=f"C{i}", s=50, label=f"{run.label} {kind}" if mine else None)
        if not math.isnan(run.wall_seconds):
            ax.axvline(run.wall_seconds, color=f"C{i}", linestyle=":", linewidth=1, label=f"{run.label} end")
    ax.set_yticks(range(len(rows)), [f"{role} {rank}" for role, rank in rows])
    ax.set_ylim(-0.5, max(len(rows), 1) - 0.5)
    ax.set_xlim(left=0)  # the whole run, from the scheduler's start
    ax.set(title="Membership events", xlabel="seconds since the scheduler started")
    ax.legend(fontsize="small")
    if not rows:
        _say_empty(ax, "no workers or servers joined, left or died")


def _say_empty(ax, text):
    ax.text(0.5, 0.5, text, transform=ax.transAxes, ha="center", va="center", color="grey")


def _headline(run: Run) -> str:
    line = f"{run.label}: {run.mode}, {run.state}"
    if not math.isnan(run.final_accuracy):
        line += f", test accuracy {run.final_accuracy:.4f}"
    if not math.isnan(run.final_auc):
        line += f", AUC {run.final_auc:.4f}"
    if run.failure:
        line += f" ({run.failure if len(run.failure) <= 90 else run.failure[:89] + '…'})"
    return line


def draw(runs: List[Run], title: Optional[str]):
    """The figure of `runs` (each with at least one epoch)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    fig, axes = plt.subplots(2, 3, figsize=(15, 8.5), layout="constrained")
    for drawer, ax in zip((_draw_losses, _draw_test_metrics, _draw_step_times, _draw_throughput,
                           _draw_worker_samples, _draw_membership), axes.flat):
        drawer(ax, runs)
        ax.grid(alpha=0.3)
    for ax in axes.flat[:4]:  # the per-epoch panels
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    heading = "\n".join(_headline(r) for r in runs)
    fig.suptitle(f"{title}\n{heading}" if title else heading, fontsize="medium")
    return fig


# --- command line ---


def parse_args(argv):
    parser = argparse.ArgumentParser(
        prog="pstrain-plot", description="Draws pstrain run summaries (--summary_json) as one PNG figure.")
    parser.add_argument("summaries", nargs="+", metavar="SUMMARY.json", help="run summaries, overlaid")
    parser.add_argument("-o", "--output", required=True, metavar="OUT.png", help="the PNG to write")
    parser.add_argument("--label", action="append", default=[],
                        help="a summary's name in the legends, once per summary, in order "
                             "(default: the file names)")
    parser.add_argument("--title", help="a line above the figure")
    args = parser.parse_args(argv)
    if args.label and len(args.label) != len(args.summaries):
        parser.error(f"{len(args.label)} --label for {len(args.summaries)} summaries: give one per summary")
    return args


def main(argv=None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    labels = args.label or default_labels(args.summaries)
    try:
        runs = [load_run(path, label) for path, label in zip(args.summaries, labels)]
    except InputError as e:
        print(f"pstrain-plot: {e}", file=sys.stderr)
        return 1
    plottable = [r for r in runs if r.epochs]
    for run in runs:
        if not run.epochs:
            why = f" ({run.failure})" if run.failure else ""
            print(f"pstrain-plot: {run.label}: no epochs to plot; the job is {run.state}{why}", file=sys.stderr)
    if not plottable:
        print("pstrain-plot: nothing to plot", file=sys.stderr)
        return 1
    try:
        import matplotlib  # noqa: F401  (only to say clearly what is missing)
    except ImportError as e:
        print(f"pstrain-plot: needs matplotlib (Debian: apt-get install python3-matplotlib): {e}",
              file=sys.stderr)
        return 1
    fig = draw(plottable, args.title)
    try:
        fig.savefig(args.output, format="png", dpi=100)
    except OSError as e:
        print(f"pstrain-plot: cannot write {args.output}: {e.strerror or e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
