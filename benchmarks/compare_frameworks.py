"""Measured and predicted latency vs batch, per framework, one figure per model family.

    python benchmarks/compare_frameworks.py          # reads benchmarks/results/local/cpu-<F>.csv
    python benchmarks/compare_frameworks.py --results benchmarks/results/cpu-xeon

Reads the CSVs that ``benchmarks/validate.py`` writes (one per CPU framework: eager, torchscript,
onnxruntime, inductor; missing ones are left out) and writes
``cpu-frameworks-<family>.png`` in the same folder for each family of ``ftmodel.tools.zoo`` (cnn,
mobile-cnn, transformer, mlp): one panel per model, latency (ms, log) against batch (log), solid
lines + dots measured, dashed lines predicted, one colour per framework.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ftmodel.frameworks.base import framework_names  # noqa: E402
from ftmodel.tools.zoo import ZOO  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
FRAMEWORKS = framework_names("cpu")
COLORS = {"eager": "tab:blue", "onnxruntime": "tab:orange", "torchscript": "tab:green",
          "inductor": "tab:red"}
FAMILIES = ("cnn", "mobile-cnn", "transformer", "mlp")


def load(results: Path) -> dict[str, dict[str, list[tuple[int, float, float]]]]:
    """framework -> model -> [(batch, measured_s, predicted_s)] sorted by batch."""
    out: dict[str, dict[str, list[tuple[int, float, float]]]] = {}
    for fw in FRAMEWORKS:
        path = results / f"cpu-{fw}.csv"
        if not path.exists():
            continue
        rows: dict[str, list[tuple[int, float, float]]] = defaultdict(list)
        with open(path, newline="") as f:
            for r in csv.DictReader(f):
                rows[r["model"]].append((int(r["batch"]), float(r["measured_s"]),
                                         float(r["predicted_s"])))
        out[fw] = {m: sorted(v) for m, v in rows.items()}
    return out


def machine_of(results: Path) -> str:
    """The CPU named in the results folder's calibrated profile, else "this CPU"."""
    try:
        return str(json.loads((results / "cpu-profile.json").read_text())["provenance"]["device"])
    except (OSError, ValueError, KeyError, TypeError):
        return "this CPU"


def plot_family(data: dict[str, dict[str, list[tuple[int, float, float]]]], family: str,
                path: Path, machine: str = "this CPU") -> bool:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    models = [m for m, z in ZOO.items() if z.family == family
              and any(m in per_model for per_model in data.values())]
    if not models:
        return False
    cols = min(3, len(models))
    rows = (len(models) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(4.6 * cols, 3.8 * rows), squeeze=False)
    for ax, model in zip(axes.flat, models):
        for fw, per_model in data.items():
            pts = per_model.get(model)
            if not pts:
                continue
            b = [p[0] for p in pts]
            ax.plot(b, [p[1] * 1e3 for p in pts], "-o", ms=3, color=COLORS[fw],
                    label=f"{fw} measured")
            ax.plot(b, [p[2] * 1e3 for p in pts], "--", color=COLORS[fw], alpha=0.8,
                    label=f"{fw} predicted")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_title(model, fontsize=10)
        ax.set_xlabel("batch")
        ax.set_ylabel("latency (ms)")
        ax.grid(True, which="both", alpha=0.3)
    for ax in list(axes.flat)[len(models):]:
        ax.axis("off")
    handles, labels = axes.flat[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=min(8, len(labels)), fontsize=8)
    fig.suptitle(f"{family}: measured (solid) and predicted (dashed) latency on {machine}")
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--results", default=str(RESULTS / "local"))
    args = ap.parse_args(argv)
    results = Path(args.results)
    data = load(results)
    if not data:
        print(f"no cpu-<framework>.csv in {results}; run benchmarks/validate.py first")
        return 1
    for family in FAMILIES:
        path = results / f"cpu-frameworks-{family}.png"
        if plot_family(data, family, path, machine_of(results)):
            print(f"wrote {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
