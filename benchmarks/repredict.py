"""Re-predict the points of a committed live validation with the current code, against the
latencies measured then (a screen for a model change between live runs; not a validation:
predicted and measured are not from the same run).

    python benchmarks/repredict.py benchmarks/results/gpu-h100/eager-run1.csv \\
        --profile benchmarks/results/gpu-h100/h100-profile.json
    python benchmarks/repredict.py benchmarks/results/cpu-eager.csv \\
        --profile benchmarks/results/cpu-profile.json --framework eager

Prints median / P90 APE and Spearman ρ of the committed predictions and of the new ones on the
same measured points, and the models whose median APE moved most.
"""

from __future__ import annotations

import argparse
import csv
import statistics
import sys
from pathlib import Path

import numpy as np
import torch
from scipy.stats import spearmanr

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ftmodel.api import Predictor  # noqa: E402
from ftmodel.hardware.registry import load_profile  # noqa: E402
from ftmodel.zoo import get_model  # noqa: E402


def _stats(pred: np.ndarray, meas: np.ndarray) -> str:
    ape = np.abs(pred - meas) / meas
    return (f"median APE {np.median(ape):.1%}, P90 {np.quantile(ape, 0.9):.1%}, "
            f"ρ {spearmanr(pred, meas).statistic:.3f}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("csv", help="a validation CSV (benchmarks/validate.py output)")
    ap.add_argument("--profile", required=True, help="a profile path or built-in name")
    ap.add_argument("--host", default=None, help="host half from this profile")
    ap.add_argument("--framework", default=None, help="default: the CSV's framework column")
    args = ap.parse_args(argv)
    rows = list(csv.DictReader(open(args.csv)))
    fw = args.framework or rows[0]["framework"]
    profile = load_profile(args.profile)  # a path or a built-in name
    predictor = Predictor(fw, profile, host=args.host, heap="kept")  # as validate.py measures
    by_model: dict[str, list[dict[str, str]]] = {}
    for r in rows:
        by_model.setdefault(r["model"], []).append(r)
    old, new, meas, names = [], [], [], []
    for name, rs in by_model.items():
        zm = get_model(name)
        torch.manual_seed(0)
        batches = [int(r["batch"]) for r in rs]
        preds = predictor.predict(zm.build().eval(), batches, zm.make_inputs)
        for r, p in zip(rs, preds):
            old.append(float(r["predicted_s"]))
            new.append(p.latency_s)
            meas.append(float(r["measured_s"]))
            names.append(name)
    o, n, m = np.array(old), np.array(new), np.array(meas)
    print(f"{args.csv}: {len(m)} points, framework {fw}")
    print(f"  committed predictions: {_stats(o, m)}")
    print(f"  current code:          {_stats(n, m)}")
    change = np.abs(n - o) / o
    print(f"  predictions moved: median {np.median(change):.2%}, max {change.max():.2%}")
    moved = []
    for name in by_model:
        idx = [i for i, x in enumerate(names) if x == name]
        before = statistics.median(abs(o[i] - m[i]) / m[i] for i in idx)
        after = statistics.median(abs(n[i] - m[i]) / m[i] for i in idx)
        moved.append((after - before, name, before, after))
    for d, name, before, after in sorted(moved, key=lambda x: -abs(x[0]))[:6]:
        print(f"  {name:<24} median APE {before:.1%} -> {after:.1%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
