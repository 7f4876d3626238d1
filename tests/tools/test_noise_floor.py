"""benchmarks/noise_floor.py: the floor and ftmodel's own errors, median and P90, per run.

Three synthetic corpus runs of the same points: each run's floor is its measurements against
the geometric mean of the other runs' (leave one run out), and ftmodel's its committed
predictions against its measurements; the P90 is numpy's linearly interpolated percentile, as
``benchmarks/corpus.py`` reports it.
"""

from __future__ import annotations

import csv
import sys
from pathlib import Path

import numpy as np

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCH))

import noise_floor  # noqa: E402

FIELDS = ["model", "half", "framework", "heap", "batch", "measured_s", "predicted_s"]


def _write(path: Path, measured: list[float], predicted: list[float]) -> Path:
    path.parent.mkdir(parents=True)
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS)
        w.writeheader()
        for i, (m, p) in enumerate(zip(measured, predicted, strict=True)):
            w.writerow({"model": f"m{i}", "half": "held-out", "framework": "eager",
                        "heap": "plain", "batch": "1", "measured_s": m, "predicted_s": p})
    return path


def _row(report: str, run: str) -> list[str]:
    line = next(x for x in report.splitlines()
                if x.startswith(f"| {run} | held-out |"))  # the "plain" section comes first
    return [c.strip() for c in line.strip("|").split("|")]


def test_each_run_gets_its_floor_and_own_error_as_median_and_p90(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    n = 12
    runs = [rng.uniform(1.0, 2.0, n) for _ in range(3)]
    predicted = list(rng.uniform(1.0, 2.0, n))
    paths = [_write(tmp_path / f"run{i}" / "corpus-eager.csv", list(m), predicted)
             for i, m in enumerate(runs)]
    report = noise_floor.report(paths, "eager")
    for i, m in enumerate(runs):
        others = [r for j, r in enumerate(runs) if j != i]
        mean = np.exp(np.mean(np.log(others), axis=0))
        floor = np.abs(mean / m - 1)
        own = np.abs(np.array(predicted) / m - 1)
        cells = _row(report, f"run{i}")
        assert cells[2] == f"{100 * np.median(floor):.1f}% / {100 * np.median(own):.1f}%"
        assert cells[-1] == (f"{100 * np.percentile(floor, 90):.1f}% / "
                             f"{100 * np.percentile(own, 90):.1f}%")
