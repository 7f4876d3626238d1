"""Predict the Framework Tax paper's GPU measurements with the built-in profiles.

    .venv/bin/python benchmarks/paper_gpus.py        # ~15 min on 2 cores (tracing dominates)

For every eager point of ``shared/data/framework_tax/latency.csv`` whose model can be built here
(``gpu_common.MODELS``; timm models are skipped) it writes ``benchmarks/results/paper-gpus.csv``
with three predictions:

* ``predicted_s`` — ``ftmodel.predict_latency`` with the built-in profile (fitted on all three
  GPUs: in-sample);
* ``logo_s`` — leave one GPU out: the efficiency and host parameters are fitted on the two other
  GPUs (``fit_gpu_efficiency.fit``), the left-out GPU's profile is built from its spec sheet with
  them, and its host is the default ``paper-host`` of that fit (its own host is never seen);
* ``macs_proxy_s`` — the MACs proxy: latency = c · MACs (THOP's count, as in the paper) with c
  fitted in log space on the same GPU × precision points (an optimistic baseline: it sees them).

``paper-gpus-summary.md`` has the median absolute percentage error per GPU × framework ×
precision, per regime (batch ≤ 4, batch ≥ 32), the crossover batch against the measured knee for
ResNet-50 and BERT, and the fitted parameters; ``paper-gpus-<model>.png`` plot predicted against
measured latency over batch size like the paper's Figure 4.

The knee of a measured curve is the batch where ``max(plateau, slope · batch)`` fitted in log space
turns from flat to linear; the predicted crossover is ``Prediction.crossover_batch`` (host time =
device time on the predicted curves).
"""

from __future__ import annotations

import argparse
import csv
import inspect
import json
import math
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from build_gpu_profiles import build  # noqa: E402
from fit_gpu_efficiency import (  # noqa: E402
    fit,
    params_json,
    prepare,
)
from gpu_common import (  # noqa: E402
    DATA_GPUS,
    MAX_BATCH,
    MODELS,
    SKIPPED_MODELS,
    Point,
    build_model,
    latency_points,
)

import ftmodel  # noqa: E402
from ftmodel.api import Predictor  # noqa: E402
from ftmodel.estimate.kernels import DeviceModel  # noqa: E402
from ftmodel.hardware.profile import HardwareProfile  # noqa: E402
from ftmodel.tracing.records import Trace  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
PARAMS = Path(__file__).resolve().parent / "gpu_efficiency.json"
GPU_LABEL = {v: k for k, v in DATA_GPUS.items()}
_TRACES: dict[tuple[str, int, str], Trace] = {}


class CachedPredictor(Predictor):
    """A Predictor whose traces are shared across GPUs (tracing is GPU-independent)."""

    model_name = ""

    def trace(self, model: Any, inputs: Any, batch: int) -> Trace:
        key = (self.model_name, batch, self.dtype)
        if key not in _TRACES:
            _TRACES[key] = super().trace(model, inputs, batch)
        return _TRACES[key]


def _check_library() -> None:
    if "dtype" not in inspect.signature(DeviceModel.__init__).parameters:
        raise SystemExit("this ftmodel lacks per-dtype roofline parameters (the kernels.py/api.py "
                         "change of issue 4); fp16 predictions would use fp32 peaks")


def predict_series(profile: HardwareProfile, name: str, dtype: str, batches: list[int],
                   model: Any) -> list[Any]:
    pred = CachedPredictor("eager", profile, dtype=dtype)
    pred.model_name = name
    return pred.predict(model, batches, MODELS[name].inputs)


def knee(batches: np.ndarray, lat: np.ndarray) -> float:
    """Batch where max(plateau, slope·batch), fitted in log space, turns linear."""
    best, best_k = math.inf, float("nan")
    for k in np.geomspace(0.5, 2048, 400):
        shape = np.log(np.maximum(1.0, batches / k))
        a = float(np.mean(np.log(lat) - shape))
        sse = float(np.sum((np.log(lat) - a - shape) ** 2))
        if sse < best:
            best, best_k = sse, float(k)
    return best_k


def ape(pred: float, meas: float) -> float:
    return abs(pred - meas) / meas * 100.0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(MODELS))
    args = ap.parse_args(argv)
    _check_library()
    t0 = time.time()
    wanted = set(args.models.split(","))
    points = [p for p in latency_points(("eager",))
              if p.model in wanted and p.batch <= MAX_BATCH.get(p.model, 10**9)]
    skipped = sorted({p.model for p in latency_points(("eager",)) if p.model not in MODELS})

    # leave-one-GPU-out parameter sets
    groups, table, info, specs, ksum, kg = prepare()
    logo_profiles: dict[str, HardwareProfile] = {}
    logo_params: dict[str, dict[str, Any]] = {}
    for out_gpu in DATA_GPUS.values():
        train = [g for g in DATA_GPUS.values() if g != out_gpu]
        fr = fit(groups, train, specs, ksum, kg)
        params = params_json(fr, table, info)
        logo_params[out_gpu] = params
        profs, _ = build(params, [specs[out_gpu]])
        logo_profiles[out_gpu] = profs[0]
        print(f"LOGO fit without {out_gpu}: rmse {fr.rmse_log:.3f} ({fr.seconds:.0f}s)", flush=True)

    series: dict[tuple[str, str, str], list[Point]] = defaultdict(list)
    for p in points:
        series[(p.model, p.precision, p.gpu)].append(p)
    rows = []
    for model_name in sorted({k[0] for k in series}):
        model = build_model(model_name)
        for (m, dt, gpu), pts in sorted(series.items()):
            if m != model_name:
                continue
            batches = [p.batch for p in pts]
            ins = predict_series(ftmodel.load_profile(gpu), m, dt, batches, model)
            out = predict_series(logo_profiles[gpu], m, dt, batches, model)
            for p, a, b in zip(pts, ins, out):
                rows.append({"gpu": GPU_LABEL[gpu], "framework": "eager", "precision": dt,
                             "model": m, "batch": p.batch, "n_runs": p.n_runs,
                             "measured_s": p.latency_s, "predicted_s": a.latency_s,
                             "logo_s": b.latency_s, "overhead_s": a.overhead_s,
                             "compute_s": a.compute_s, "regime": a.regime,
                             "n_launches": a.n_launches, "macs": a.macs,
                             "macs_thop": p.macs_thop, "crossover_batch": a.crossover_batch,
                             "logo_crossover_batch": b.crossover_batch})
        print(f"{model_name}: done ({time.time() - t0:.0f}s, {len(_TRACES)} traces)", flush=True)

    # MACs proxy, fitted per GPU x precision on the same points
    by_gp: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        by_gp[(r["gpu"], r["precision"])].append(r)
    for rs in by_gp.values():
        ok = [r for r in rs if r["macs_thop"] > 0]
        c = math.exp(statistics.fmean(math.log(r["measured_s"] / r["macs_thop"]) for r in ok))
        for r in rs:
            r["macs_proxy_s"] = c * r["macs_thop"] if r["macs_thop"] > 0 else float("nan")

    RESULTS.mkdir(exist_ok=True)
    with open(RESULTS / "paper-gpus.csv", "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        for r in rows:
            w.writerow({k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in r.items()})
    summary = summarise(rows, logo_params, skipped)
    (RESULTS / "paper-gpus-summary.md").write_text(summary)
    plot(rows)
    print(summary)
    print(f"total {time.time() - t0:.0f}s")
    return 0


def _med(xs: list[float]) -> str:
    return f"{statistics.median(xs):.1f}" if xs else "–"


def summarise(rows: list[dict[str, Any]], logo_params: dict[str, dict[str, Any]],
              skipped: list[str]) -> str:
    params = json.loads(PARAMS.read_text())
    out = ["# Paper GPUs: predicted vs measured eager latency", "",
           "Generated by `benchmarks/paper_gpus.py` from `shared/data/framework_tax/latency.csv`"
           " (PyTorch 1.12 eager, the paper's measurements). MdAPE = median absolute percentage "
           "error. *fit* = built-in profiles (parameters fitted on all three GPUs); *LOGO* = "
           "leave-one-GPU-out (fitted on the other two GPUs, default `paper-host` host); "
           "*MACs* = latency ∝ MACs fitted on the same points.", "",
           f"Models predicted: {', '.join(sorted({r['model'] for r in rows}))}. "
           "Not predicted: " + ", ".join(f"{m} ({SKIPPED_MODELS.get(m, 'not built')})"
                                         for m in skipped) + "."
           " Longformer only up to batch 4 (the tracer runs it for real).", "",
           "| GPU | framework | precision | points | MdAPE fit | MdAPE LOGO | MdAPE MACs | "
           "fit b≤4 | LOGO b≤4 | MACs b≤4 | fit b≥32 | LOGO b≥32 | MACs b≥32 |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    keys = sorted({(r["gpu"], r["framework"], r["precision"]) for r in rows})
    for g, fw, dt in keys:
        rs = [r for r in rows if (r["gpu"], r["framework"], r["precision"]) == (g, fw, dt)]
        cells = []
        for sel in (lambda r: True, lambda r: r["batch"] <= 4, lambda r: r["batch"] >= 32):
            sub = [r for r in rs if sel(r)]
            for col in ("predicted_s", "logo_s", "macs_proxy_s"):
                cells.append(_med([ape(r[col], r["measured_s"]) for r in sub
                                   if not math.isnan(r[col])]))
        order = [cells[0], cells[1], cells[2], cells[3], cells[4], cells[5], cells[6], cells[7],
                 cells[8]]
        out.append(f"| {g} | {fw} | {dt} | {len(rs)} | " + " | ".join(order) + " |")
    out += ["", "## Leave-one-GPU-out", "",
            "| left-out GPU | points | MdAPE LOGO | MdAPE fit (same points) | target ≤ 25% |",
            "|---|---|---|---|---|"]
    for g in DATA_GPUS:
        rs = [r for r in rows if r["gpu"] == g]
        m = statistics.median(ape(r["logo_s"], r["measured_s"]) for r in rs)
        out.append(f"| {g} | {len(rs)} | {m:.1f} | "
                   f"{_med([ape(r['predicted_s'], r['measured_s']) for r in rs])} | "
                   f"{'met' if m <= 25 else 'missed'} |")
    out += ["", "## Crossover batch vs measured knee", "",
            "Knee: where `max(plateau, slope·batch)` fitted to the measured curve in log space "
            "turns linear. Crossover: `Prediction.crossover_batch` (host time = device time).", "",
            "| model | GPU | precision | measured knee | crossover fit | ratio | crossover LOGO "
            "| ratio | within 2× |", "|---|---|---|---|---|---|---|---|---|"]
    for model in ("resnet50", "bert"):
        for g in DATA_GPUS:
            for dt in ("fp32", "fp16"):
                rs = sorted((r for r in rows if (r["model"], r["gpu"], r["precision"]) ==
                             (model, g, dt)), key=lambda r: r["batch"])
                if len(rs) < 4:
                    continue
                k = knee(np.array([r["batch"] for r in rs], dtype=float),
                         np.array([r["measured_s"] for r in rs]))
                x_fit, x_logo = rs[0]["crossover_batch"], rs[0]["logo_crossover_batch"]
                rf = x_fit / k if x_fit else float("nan")
                rl = x_logo / k if x_logo else float("nan")
                ok = all(0.5 <= r <= 2.0 for r in (rf, rl))
                fmt = lambda x: f"{x:.1f}" if x else "none"  # noqa: E731
                out.append(f"| {model} | {g} | {dt} | {k:.1f} | {fmt(x_fit)} | {rf:.2f} | "
                           f"{fmt(x_logo)} | {rl:.2f} | {'yes' if ok else 'no'} |")
    out += ["", "## Fitted parameters (built-in profiles)", "", "```json",
            json.dumps({k: params[k] for k in ("fitted_on_gpus", "fit", "device",
                                               "launches_per_op", "host_events_eager_ref_s")},
                       indent=1),
            json.dumps({h: {"speed_factor": v["speed_factor"]}
                        for h, v in params["hosts"].items()}, indent=1), "```", "",
            "LOGO fits (device parameters):", "", "```json",
            json.dumps({g: {"device": p["device"], "fit": p["fit"]}
                        for g, p in logo_params.items()}, indent=1), "```", ""]
    return "\n".join(out)


def plot(rows: list[dict[str, Any]]) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colors = {"RTX-8000": "tab:green", "TitanX": "tab:blue", "1080Ti": "tab:orange"}
    for model, title in (("resnet50", "ResNet-50"), ("bert", "BERT-Base")):
        fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharey=True)
        for ax, dt in zip(axes, ("fp32", "fp16")):
            for g, c in colors.items():
                rs = sorted((r for r in rows if (r["model"], r["gpu"], r["precision"]) ==
                             (model, g, dt)), key=lambda r: r["batch"])
                if not rs:
                    continue
                b = [r["batch"] for r in rs]
                ax.plot(b, [r["measured_s"] * 1e3 for r in rs], "o-", color=c, label=f"{g} measured")
                ax.plot(b, [r["predicted_s"] * 1e3 for r in rs], "--", color=c, label=f"{g} predicted")
                ax.plot(b, [r["logo_s"] * 1e3 for r in rs], ":", color=c, label=f"{g} LOGO")
                if rs[0]["crossover_batch"]:
                    ax.axvline(rs[0]["crossover_batch"], color=c, alpha=0.3, lw=1)
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_xlabel("batch size")
            ax.set_title(f"{title} ({dt}, PyTorch eager)")
            ax.grid(True, which="both", alpha=0.3)
        axes[0].set_ylabel("latency (ms)")
        axes[1].legend(fontsize=7, ncol=1)
        fig.suptitle("Predicted vs measured (Framework Tax data); vertical lines: predicted "
                     "crossover", fontsize=9)
        fig.tight_layout()
        fig.savefig(RESULTS / f"paper-gpus-{model}.png", dpi=110)
        plt.close(fig)


if __name__ == "__main__":
    raise SystemExit(main())
