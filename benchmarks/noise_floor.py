"""How well can any prediction match one corpus run, given how much runs of the same points differ?

Reads several committed corpus runs (``benchmarks/corpus.py`` CSVs) that measured the same
points (model, batch, heap) on one machine, and reports, per half and per batch:

- the *reproducibility* of the measurements: median |run A / run B − 1| over the shared points,
  for every pair of runs;
- the *noise floor* of each run: the median (and P90) APE of a predictor that knows the other
  runs' measurements of the very same points (their geometric mean, leave one run out). It uses
  the measurements themselves, so no deterministic predictor can be expected to beat it by much;
- ftmodel's median (and P90) APE on the same points, as committed in each run's CSV (predicted
  in that run, with its own calibration).

Both for the times as measured ("plain") and for the times at the calibration's machine speed
(the ``measured_at_speed_s`` column, where the run recorded it).

    python benchmarks/noise_floor.py benchmarks/results/cpu-xeon/corpus-calibration-x{5,6,7,12}/corpus-eager.csv \\
        --out benchmarks/results/cpu-xeon/noise-floor.md
"""

from __future__ import annotations

import argparse
import csv
import itertools
import math
import statistics
from collections.abc import Callable
from pathlib import Path

import numpy as np

Key = tuple[str, str, str]  # model, batch, heap
COLUMNS = {"plain": "measured_s", "at calibration speed": "measured_at_speed_s"}


def _load(path: Path, framework: str) -> dict[Key, dict[str, str]]:
    with path.open(newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["framework"] == framework]
    if not rows:
        raise SystemExit(f"{path}: no rows for framework {framework!r}; pass --framework with one "
                         "of the CSV's frameworks")
    return {(r["model"], r["batch"], r["heap"]): r for r in rows}


def _value(row: dict[str, str], column: str) -> float | None:
    text = row.get(column, "")
    try:
        v = float(text)
    except ValueError:
        return None
    return v if math.isfinite(v) and v > 0 else None


def _median_pct(values: list[float]) -> str:
    return f"{100 * statistics.median(values):.1f}%" if values else "–"


def _p90_pct(values: list[float]) -> str:
    """The 90th percentile, as ``benchmarks/corpus.py`` reports its P90 (``numpy.percentile``)."""
    return f"{100 * float(np.percentile(values, 90)):.1f}%" if values else "–"


def _errors(runs: list[dict[Key, dict[str, str]]], i: int, shared: list[Key], column: str,
            half: str) -> list[tuple[str, float, float]]:
    """(batch, floor APE, ftmodel APE) of each shared point of run ``i``'s ``half`` that every
    run measured: the floor is the geometric mean of the other runs' measurements against this
    run's, ftmodel's the run's committed prediction against it."""
    out = []
    run = runs[i]
    for k in shared:
        if run[k]["half"] != half:
            continue
        measured = _value(run[k], column)
        others = [_value(r[k], column) for j, r in enumerate(runs) if j != i]
        if measured is None or any(o is None for o in others):
            continue
        mean = math.exp(statistics.fmean(math.log(o) for o in others if o))
        out.append((k[1], abs(mean / measured - 1),
                    abs(float(run[k]["predicted_s"]) / measured - 1)))
    return out


def _pair(errs: list[tuple[str, float, float]], stat: Callable[[list[float]], str]) -> str:
    """``floor / ftmodel`` of ``errs`` by ``stat``."""
    return f"{stat([e[1] for e in errs])} / {stat([e[2] for e in errs])}"


def _run_name(path: Path) -> str:
    return path.parent.name


def report(paths: list[Path], framework: str) -> str:
    runs = [_load(p, framework) for p in paths]
    names = [_run_name(p) for p in paths]
    shared = sorted(set.intersection(*(set(r) for r in runs)))
    halves = sorted({runs[0][k]["half"] for k in shared})
    batches = sorted({k[1] for k in shared}, key=int)
    lines = [f"# Noise floor: {framework}, {len(paths)} corpus runs of the same points", "",
             "- command: `python benchmarks/noise_floor.py "
             + " ".join(str(p) for p in paths) + f" --framework {framework}`",
             f"- shared points: {len(shared)} (model × batch × heap measured in every run)",
             "- floor: median APE of the geometric mean of the *other* runs' measurements of the "
             "same point (leave one run out) against this run's; ftmodel: the run's own "
             "committed prediction (its calibration) on the same points", ""]
    for label, column in COLUMNS.items():
        lines += [f"## {label}", "", "Between runs (median |A / B − 1| over the shared points):",
                  "", "| run A | run B | " + " | ".join(halves) + " |",
                  "|---|---|" + "---|" * len(halves)]
        for i, j in itertools.combinations(range(len(runs)), 2):
            cells = []
            for half in halves:
                diffs = [abs(a / b - 1) for k in shared if runs[i][k]["half"] == half
                         for a, b in [(_value(runs[i][k], column), _value(runs[j][k], column))]
                         if a is not None and b is not None]
                cells.append(_median_pct(diffs))
            lines.append(f"| {names[i]} | {names[j]} | " + " | ".join(cells) + " |")
        lines += ["", "Each run against the others (median APE, and P90 APE over all batches; "
                  "floor / ftmodel):", "",
                  "| run | half | all batches | " + " | ".join(f"b{b}" for b in batches)
                  + " | P90, all batches |",
                  "|---|---|---|" + "---|" * len(batches) + "---|"]
        for i in range(len(runs)):
            for half in halves:
                errs = _errors(runs, i, shared, column, half)
                cells = [_pair([e for e in errs if batch is None or e[0] == batch], _median_pct)
                         for batch in [None, *batches]]
                cells.append(_pair(errs, _p90_pct))
                lines.append(f"| {names[i]} | {half} | " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("csv", nargs="+", type=Path, help="corpus CSVs of the same points (two or more)")
    ap.add_argument("--framework", default="eager", help="the framework's rows to compare")
    ap.add_argument("--out", type=Path, default=None, help="also write the report here (markdown)")
    args = ap.parse_args(argv)
    if len(args.csv) < 2:
        ap.error("give at least two corpus CSVs of the same points")
    text = report(args.csv, args.framework)
    print(text)
    if args.out is not None:
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
