#!/usr/bin/env python3
"""Prints bench/ctr_accuracy.sh's table from the run summaries in OUT_DIR.

Usage: ctr_accuracy_report.py OUT_DIR PLANTED_AUC
"""
import json
import math
import os
import sys

RUNS = [("sync22", "sync, 2 servers x 2 workers, batch B"),
        ("sync11", "sync, 1 server x 1 worker, batch 2B (same global batch)"),
        ("async22", "async, 2 servers x 2 workers, batch B"),
        ("sync22fm", "sync, 2 servers x 2 workers, batch B, `--ctr_interaction=fm` (DeepFM)")]


def load(out_dir, name):
    try:
        with open(os.path.join(out_dir, name + ".json")) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def main(argv):
    if len(argv) != 3:
        sys.exit(__doc__)
    out_dir, planted = argv[1], float(argv[2])
    print()
    print("| run | test AUC (± bound) | vs planted | test log loss | training samples/s |")
    print("|---|---:|---:|---:|---:|")
    print("| planted model | %.4f | | | |" % planted)
    aucs = {}
    for name, label in RUNS:
        s = load(out_dir, name)
        if s is None or s.get("state") != "FINISHED":
            print("| %s | failed | | | |" % label)
            continue
        auc = s.get("final_test_auc", float("nan"))
        aucs[name] = auc
        print("| %s | %.4f ± %.1e | %+.4f | %.4f | %.0f |" % (
            label, auc, s.get("final_test_auc_error_bound", float("nan")), auc - planted,
            s.get("final_test_logloss", float("nan")), s.get("samples_per_second", float("nan"))))
    if "sync22" in aucs and "sync11" in aucs:
        print("\nsync 2x2 - sync 1x1 (same global batch): %+.4f AUC" % (aucs["sync22"] - aucs["sync11"]))
    if "sync22" in aucs and "async22" in aucs:
        print("async 2x2 - sync 2x2: %+.4f AUC" % (aucs["async22"] - aucs["sync22"]))
    if "sync22" in aucs and "sync22fm" in aucs:
        print("DeepFM - MLP (sync 2x2): %+.4f AUC" % (aucs["sync22fm"] - aucs["sync22"]))
    if any(math.isnan(a) for a in aucs.values()):
        print("(an AUC is NaN: some evaluation lease reported no scores)")


if __name__ == "__main__":
    main(sys.argv)
