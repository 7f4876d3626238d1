"""Summary tables and Figure-4-style plots of ``paper_gpus.py`` (see its docstring)."""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from fit_gpu_efficiency import BOUNDS, DEVICE_KEYS, Group
from gpu_common import DATA_GPUS
from gpu_launches import trace_launch_counts

FRAMEWORK_ORDER = ("eager", "torchscript", "onnxruntime-cuda")
# measured live (results/gpu-h100), never in any fit (h100_logo.py): with the default host, and
# eager with the measuring machine's own calibrated host half
OUTSIDE_FIT = ("H100", "H100 (H200 machine's host)", "H100 (own host)")
LOGO_GPUS = (*DATA_GPUS, *OUTSIDE_FIT)
LOGO_FRAMEWORKS = (*FRAMEWORK_ORDER, "cudagraphs")
MODEL_ALIAS = {"bert-base": "bert"}  # the H100 zoo's BERT-Base is the paper's bert
Row = dict[str, Any]


def ape(pred: float, meas: float) -> float:
    return abs(pred - meas) / meas * 100.0


def _med(xs: list[float]) -> str:
    return f"{statistics.median(xs):.1f}" if xs else "–"


def _mdape(rows: list[Row], col: str, sel: Callable[[Row], bool] = lambda r: True) -> str:
    return _med([ape(r[col], r["measured_s"]) for r in rows if sel(r)
                 and not math.isnan(r[col])])


def SMALL(r: Row) -> bool:
    return bool(r["batch"] <= 4)


def LARGE(r: Row) -> bool:
    return bool(r["batch"] >= 32)


def _per_key_table(rows: list[Row]) -> list[str]:
    out = ["| GPU | framework | precision | points | MdAPE fit | MdAPE LOGO | MdAPE MACs | "
           "fit b≤4 | LOGO b≤4 | MACs b≤4 | fit b≥32 | LOGO b≥32 | MACs b≥32 |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    keys = sorted({(r["gpu"], r["framework"], r["precision"]) for r in rows})
    for key in keys:
        rs = [r for r in rows if (r["gpu"], r["framework"], r["precision"]) == key]
        cells = [_mdape(rs, col, sel) for sel in (lambda r: True, SMALL, LARGE)
                 for col in ("predicted_s", "logo_s", "macs_proxy_s")]
        out.append(f"| {' | '.join(key)} | {len(rs)} | " + " | ".join(cells) + " |")
    return out


def _logo_table(rows: list[Row]) -> list[str]:
    out = ["| left-out GPU | framework | points | MdAPE LOGO | LOGO b≤4 | LOGO b≥32 | "
           "MdAPE fit (same points) | MdAPE MACs |", "|---|---|---|---|---|---|---|---|"]
    for g in LOGO_GPUS:
        for fw in ("all", *LOGO_FRAMEWORKS):
            rs = [r for r in rows if r["gpu"] == g and fw in ("all", r["framework"])]
            if not rs:
                continue
            fit = _mdape(rs, "predicted_s") if g not in OUTSIDE_FIT else "(in no fit)"
            name = "**all**" if fw == "all" else fw
            out.append(f"| {g} | {name} | {len(rs)} | {_mdape(rs, 'logo_s')} | "
                       f"{_mdape(rs, 'logo_s', SMALL)} | {_mdape(rs, 'logo_s', LARGE)} | {fit} | "
                       f"{_mdape(rs, 'macs_proxy_s')} |")
    return out


def _agrees(x: float | None, k: float) -> bool:
    """A crossover within 0.5–2× of the hinge knee; "none" (device-bound from batch 1) agrees
    with a knee at or below batch 2, and a knee below batch 1 (0) with a crossover ≤ 2."""
    if not x or not k:
        return (x or 0.0) <= 2.0 and k <= 2.0
    return 0.5 <= x / k <= 2.0


def _crossover_table(rows: list[Row]) -> list[str]:
    from paper_gpus import hinge_knee, knee
    out = ["| model | GPU | framework | precision | knee (line through origin) | knee (hinge) | "
           "crossover fit | crossover LOGO | LOGO / hinge knee | LOGO / origin knee | "
           "within 0.5–2× of the hinge knee (fit / LOGO) |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]
    fmt = lambda x: f"{x:.1f}" if x else "none"  # noqa: E731
    ratio = lambda x, k: f"{x / k:.2f}" if x and k else "–"  # noqa: E731
    for model in ("resnet50", "bert"):
        for g in LOGO_GPUS:
            for fw in LOGO_FRAMEWORKS:
                for dt in ("fp32", "fp16"):
                    rs = sorted((r for r in rows if (MODEL_ALIAS.get(r["model"], r["model"]),
                                                     r["gpu"], r["framework"], r["precision"])
                                 == (model, g, fw, dt)), key=lambda r: r["batch"])
                    if len(rs) < 4:
                        continue
                    b = np.array([r["batch"] for r in rs], dtype=float)
                    meas = np.array([r["measured_s"] for r in rs])
                    k0, kh = knee(b, meas), hinge_knee(b, meas)
                    x_fit, x_logo = rs[-1]["crossover_batch"], rs[-1]["logo_crossover_batch"]
                    ok = ["yes" if _agrees(x, kh) else "no" for x in (x_fit, x_logo)]
                    out.append(f"| {model} | {g} | {fw} | {dt} | {k0:.1f} | "
                               f"{kh:.1f} | {fmt(x_fit)} | {fmt(x_logo)} | {ratio(x_logo, kh)} | "
                               f"{ratio(x_logo, k0)} | {' / '.join(ok)} |")
    return out


def _launch_table(rows: list[Row]) -> list[str]:
    counts = trace_launch_counts()
    out = ["| framework | precision | predicted kernels | traced kernels by batch (median per "
           "batch) | median | predicted / median |", "|---|---|---|---|---|---|"]
    for fw, label in (("eager", "eager"), ("onnxruntime", "onnxruntime-cuda")):
        for dt in ("fp32", "fp16"):
            pred = [r["n_launches"] for r in rows if (r["model"], r["gpu"], r["framework"],
                                                      r["precision"]) ==
                    ("resnet50", "RTX-8000", label, dt) and r["batch"] >= 2]
            by_b = counts[fw][dt]
            med = statistics.median(by_b.values())
            if not pred:
                continue
            out.append(f"| {label} | {dt} | {pred[0]} | "
                       + ", ".join(f"{b}: {v:g}" for b, v in by_b.items())
                       + f" | {med:g} | {pred[0] / med:.2f} |")
    return out


def _bounds_hit(device: dict[str, float]) -> str:
    hits = [k for k in DEVICE_KEYS if k in BOUNDS and any(
        abs(math.log(device[k] / b)) < 1e-3 for b in BOUNDS[k])]
    return ", ".join(hits) if hits else "none"


def summarise(rows: list[Row], params: dict[str, Any], logo: dict[str, dict[str, Any]],
              skipped: dict[str, int], check: list[str], groups: list[Group],
              outside_note: str = "") -> str:
    out = ["# Paper GPUs and the H100: predicted vs measured latency, every framework", "",
           "Generated by `benchmarks/paper_gpus.py` from `benchmarks/data/framework_tax/latency.csv` "
           "(PyTorch 1.12 eager and TorchScript, ONNX Runtime 1.12 CUDA EP; the paper's "
           "measurements) and the live H100 runs (`results/gpu-h100`). MdAPE = median absolute "
           "percentage error. *fit* = built-in profiles (parameters fitted on the paper's three "
           "GPUs); *LOGO* = leave-one-GPU-out (fitted on the other two paper GPUs, default "
           "`paper-host` host; the H100 is outside every fit); *MACs* = latency ∝ MACs fitted on "
           "the same points (per GPU × framework × precision). Each GPU's efficiencies are its "
           "architecture generation's published achieved fractions of peak "
           "(`benchmarks/gpu_generations.json`: cuBLAS SGEMM, tensor-core GEMM, copy bandwidth) "
           "times residuals fitted for all GPUs (`eff_cuda`, `eff_bw`).", "",
           *([outside_note, ""] if outside_note else []),
           f"Points predicted: {len(rows)} ({', '.join(f'{fw}: ' + str(sum(r['framework'] == fw for r in rows)) for fw in LOGO_FRAMEWORKS)}); "
           f"models: {', '.join(sorted({r['model'] for r in rows}))}. Longformer only up to "
           "batch 4 (the tracer runs it for real). ONNX Runtime was measured on the RTX 8000 "
           "only, so leaving the RTX 8000 out predicts it from the documented priors of its host "
           "costs (`fit_gpu_efficiency.START`).", "", "Not predicted:", ""]
    out += [f"* {n} points — {reason}" for reason, n in sorted(skipped.items())]
    out += ["", "## Leave-one-GPU-out, over all models, frameworks and batch sizes", ""]
    out += _logo_table(rows)
    out += ["", "## Per GPU × framework × precision", ""]
    out += _per_key_table(rows)
    out += ["", "## Crossover batch vs measured knee (ResNet-50, BERT)", "",
            "Crossover: `Prediction.crossover_batch`, the batch where device time equals host "
            "time on the predicted curves (`none` = device-bound from batch 1). Two estimates "
            "of the measured knee: *line through origin* (`paper_gpus.knee`, where "
            "`max(plateau, slope·batch)` fitted in log space turns linear; the reference of "
            "earlier versions of this table) and *hinge* (`paper_gpus.hinge_knee`, where "
            "`plateau + slope·max(0, batch − k)` leaves the plateau, relative weights; 0 = "
            "rising from the first batch). Device time is `D0 + slope·batch` with a "
            "batch-independent D0 (every weight read once per kernel, per-kernel floors): the "
            "line through the origin puts the knee near host / (D0/b + slope) at the largest "
            "batches, not where device time reaches host time, (host − D0) / slope, which the "
            "hinge measures and the crossover predicts. A model whose device time at batch 1 "
            "already exceeds its host time has no crossover (`none`) and a hinge knee of 0 "
            "(or a small one), while the line through the origin still reports a knee where "
            "the slope takes over from D0. *within 0.5–2×*: against the hinge knee; `none` "
            "agrees with a hinge knee ≤ 2.", ""]
    out += _crossover_table(rows)
    out += ["", "## Kernel launches: ResNet-50 on the RTX 8000 vs the profiler traces", "",
            "Predicted: the Program's kernels after the device's helper-kernel expansion "
            "(`launches_per_op`, fitted on these traces: `gpu_launches.py`). Traced: "
            "`kernel_traces_rtx8000.csv`. cuDNN's algorithm choice changes the helper count with "
            "batch size; the expansion is one expectation over batch sizes.", ""]
    out += _launch_table(rows)
    if check:
        out += ["", "## Library check", "", "`ftmodel.predict_latency` with the built-in "
                "profiles against this benchmark's arrays:", ""]
        out += [f"* {c}" for c in check]
    dev = params["device"]
    out += ["", "## Fitted parameters (built-in profiles)", "",
            f"Device parameters at a physical bound (`fit_gpu_efficiency.BOUNDS`): "
            f"{_bounds_hit(dev)}.", "", "```json",
            json.dumps({k: params[k] for k in ("fitted_on_gpus", "fit", "device",
                                               "launches_per_op", "host_events_ref_s")},
                       indent=1),
            json.dumps({h: {"speed_factor": v["speed_factor"]}
                        for h, v in params["hosts"].items()}, indent=1), "```", "",
            "LOGO fits (device parameters):", "", "```json",
            json.dumps({g: {"device": p["device"], "fit": p["fit"]}
                        for g, p in logo.items()}, indent=1), "```", ""]
    return "\n".join(out)


def plot(rows: list[Row], results: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colors = {"RTX-8000": "tab:green", "TitanX": "tab:blue", "1080Ti": "tab:orange"}
    for model, title in (("resnet50", "ResNet-50"), ("bert", "BERT-Base")):
        fig, axes = plt.subplots(3, 2, figsize=(11, 11), sharey=True)
        for ax_row, fw in zip(axes, FRAMEWORK_ORDER):
            for ax, dt in zip(ax_row, ("fp32", "fp16")):
                for g, c in colors.items():
                    rs = sorted((r for r in rows if (r["model"], r["gpu"], r["framework"],
                                                     r["precision"]) == (model, g, fw, dt)),
                                key=lambda r: r["batch"])
                    if not rs:
                        continue
                    b = [r["batch"] for r in rs]
                    ms = lambda col: [r[col] * 1e3 for r in rs]  # noqa: E731
                    ax.plot(b, ms("measured_s"), "o-", color=c, label=f"{g} measured")
                    ax.plot(b, ms("predicted_s"), "--", color=c, label=f"{g} predicted")
                    ax.plot(b, ms("logo_s"), ":", color=c, label=f"{g} LOGO")
                    ax.plot(b, ms("macs_proxy_s"), "-.", color=c, alpha=0.35, lw=1,
                            label=f"{g} MACs proxy")
                    if rs[-1]["crossover_batch"]:
                        ax.axvline(rs[-1]["crossover_batch"], color=c, alpha=0.3, lw=1)
                ax.set_xscale("log", base=2)
                ax.set_yscale("log")
                ax.set_title(f"{title} — {fw}, {dt}", fontsize=9)
                ax.grid(True, which="both", alpha=0.3)
            ax_row[0].set_ylabel("latency (ms)")
        for ax in axes[-1]:
            ax.set_xlabel("batch size")
        axes[0][1].legend(fontsize=6, ncol=2)
        fig.suptitle("Predicted vs measured (Framework Tax data); vertical lines: predicted "
                     "crossover", fontsize=9)
        fig.tight_layout()
        fig.savefig(results / f"paper-gpus-{model}.png", dpi=100)
        plt.close(fig)


FIGURE_SERIES = {"PyTorch": "eager", "TorchScript": "torchscript", "ONNX Runtime": "onnxruntime-cuda"}
FIGURE_PANELS = {"resnet50": "ResNet-50", "bert": "BERT"}


def figure_points() -> dict[tuple[str, str, str], list[tuple[int, float]]]:
    """The paper's Figure 3 framework sweeps on the RTX 8000 (``figures_rtx8000.csv``,
    ``baselines-revised.pdf``): (model, framework, precision) -> [(batch, seconds)]."""
    import csv

    from gpu_common import FIGURES_CSV
    out: dict[tuple[str, str, str], list[tuple[int, float]]] = {}
    panels = {v: k for k, v in FIGURE_PANELS.items()}
    with open(FIGURES_CSV, newline="", encoding="utf-8") as f:
        for r in csv.DictReader(f):
            if r["figure"] != "figs/baselines-revised.pdf" or r["series"] not in FIGURE_SERIES:
                continue
            name, dt = r["panel"].split(" (")
            key = (panels[name], FIGURE_SERIES[r["series"]], dt.rstrip(")"))
            out.setdefault(key, []).append((int(float(r["x"])), float(r["latency_ms"]) * 1e-3))
    return out


def plot_frameworks(rows: list[Row], curves: dict[tuple[str, str, str], tuple[list[int],
                                                                             list[float]]],
                    results: Path) -> list[str]:
    """``paper-frameworks-rtx8000-<model>.png``: predicted latency over batch size per framework
    (built-in ``rtx8000`` profile, its fitted paper host) beside the measured points
    (latency.csv: filled; the paper's Figure 3: hollow). Returns the summary lines: the
    predicted and measured speed-up of each framework over eager at batch 1 and at the largest
    common batch."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figs = figure_points()
    colors = {"eager": "tab:red", "torchscript": "tab:blue", "onnxruntime-cuda": "tab:green"}
    lines = ["| model | precision | framework | batch | predicted ms | measured ms | "
             "predicted / eager | measured / eager |", "|---|---|---|---|---|---|---|---|"]
    for model, title in FIGURE_PANELS.items():
        fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
        for ax, dt in zip(axes, ("fp32", "fp16")):
            for fw, c in colors.items():
                if (model, fw, dt) not in curves:
                    continue
                b, lat = curves[(model, fw, dt)]
                ax.plot(b, [v * 1e3 for v in lat], "-", color=c, label=f"{fw} predicted")
                meas = sorted((r["batch"], r["measured_s"]) for r in rows
                              if (r["gpu"], r["model"], r["framework"], r["precision"])
                              == ("RTX-8000", model, fw, dt))
                if meas:
                    ax.plot([m[0] for m in meas], [m[1] * 1e3 for m in meas], "o", color=c,
                            ms=4, label=f"{fw} measured")
                fp = sorted(figs.get((model, fw, dt), []))
                if fp:
                    ax.plot([m[0] for m in fp], [m[1] * 1e3 for m in fp], "o", color=c, ms=7,
                            mfc="none", label=f"{fw} paper Fig. 3")
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_xlabel("batch size")
            ax.set_ylabel("latency (ms)")
            ax.set_title(f"{title}, {dt}, Quadro RTX 8000", fontsize=9)
            ax.grid(True, which="both", alpha=0.3)
            ax.legend(fontsize=6)
            measured = {(fw, r["batch"]): r["measured_s"] for r in rows
                        for fw in FRAMEWORK_ORDER
                        if (r["gpu"], r["model"], r["framework"], r["precision"])
                        == ("RTX-8000", model, fw, dt)}
            for (m, fw, d), pts in figs.items():  # the figure where latency.csv has no point
                for b, v in pts:
                    if (m, d) == (model, dt):
                        measured.setdefault((fw, b), v)
            lines += _speedup_lines(model, dt, curves, measured)
        fig.suptitle("Framework comparison by prediction (built-in rtx8000 profile) vs the "
                     "paper's measurements", fontsize=9)
        fig.tight_layout()
        fig.savefig(results / f"paper-frameworks-rtx8000-{model}.png", dpi=100)
        plt.close(fig)
    return lines


def _speedup_lines(model: str, dt: str, curves: dict[tuple[str, str, str], tuple[list[int],
                                                                               list[float]]],
                   measured: dict[tuple[str, int], float]) -> list[str]:
    """Rows of the framework table at batch 1 and 64 (measured: latency.csv, else the paper's
    Figure 3)."""
    out = []
    if (model, "eager", dt) not in curves:
        return out
    b_eager, l_eager = curves[(model, "eager", dt)]
    for batch in (1, 64):
        for fw in FRAMEWORK_ORDER:
            if (model, fw, dt) not in curves:
                continue
            b, lat = curves[(model, fw, dt)]
            pred, pe = lat[b.index(batch)], l_eager[b_eager.index(batch)]
            meas, me = measured.get((fw, batch)), measured.get(("eager", batch))
            ratio = f"{meas / me:.2f}" if meas and me else "–"
            out.append(f"| {model} | {dt} | {fw} | {batch} | {pred * 1e3:.2f} | "
                       f"{meas * 1e3 if meas else float('nan'):.2f} | {pred / pe:.2f} | "
                       f"{ratio} |")
    return out
