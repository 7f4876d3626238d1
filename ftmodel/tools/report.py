"""Reports: latency vs batch per framework (figure + markdown), and a per-layer breakdown.

``framework_curves(model, ["eager", "onnxruntime"], "a100", [1, 2, 4, ...])`` predicts every
framework at every batch; :func:`plot_report` draws them (latency vs batch, log-log, each
framework's framework-bound region shaded and its crossover batch marked; a second panel shows
host overhead vs device compute, whose meeting point is the crossover) and
:func:`report_markdown` writes the same numbers as a table. :func:`layer_breakdown` groups one
Prediction's per-layer costs (``Prediction.layers``) by module path for ``ftmodel explain``.

Counting semantics of the breakdown
-----------------------------------
A layer is a module path, grouped to its first ``depth`` components (None: the innermost module
that launched each kernel). Per layer: ``n_launches`` (kernels it launches), ``macs``,
``host_s`` (the host cost of its kernels plus an even share of the program's non-kernel host
events — module calls, views, Python calls — as the timeline spreads them), ``device_s`` (the
device time of its kernels), ``time_s = host_s + device_s`` (its summed cost; on an asynchronous
GPU host and device overlap, so these do not add up to the latency), ``host_share`` (host_s /
time_s: how framework-bound the layer is) and ``tax_share`` (its share of the model's total host
overhead). The per-call host cost (``per_call_s``, inductor's guards) belongs to no layer.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from torch import nn

from ftmodel.api import DeviceSpec, HostSpec, Prediction, predict_latency, resolve_profile
from ftmodel.extras import require
from ftmodel.errors import (
    BackendUnavailable,
    FrameworkUnsupported,
    InvalidArgumentError,
    ProfileError,
)
from ftmodel.frameworks.base import get_framework
from ftmodel.tracing.inputs import InputSpec

__all__ = ["EXPLAIN_COLUMNS", "FrameworkCurve", "LayerRow", "explain_rows", "framework_curves", "layer_breakdown",
           "plot_report", "report_markdown"]


@dataclass(frozen=True)
class FrameworkCurve:
    """One framework's predictions over the batch sizes, or why it has none (``skipped``)."""

    framework: str
    predictions: tuple[Prediction, ...] = ()
    skipped: str = ""

    @property
    def crossover_batch(self) -> float | None:
        return self.predictions[0].crossover_batch if self.predictions else None


def framework_curves(model: nn.Module, frameworks: Sequence[str], device: DeviceSpec,
                     batch: Sequence[int], *, inputs: InputSpec = None, dtype: str = "fp32",
                     host: HostSpec | None = None) -> list[FrameworkCurve]:
    """Predictions of ``model`` for each framework at each batch.

    Unknown framework names, an unknown profile and bad batches raise (UnknownNameError,
    InvalidArgumentError). A framework that cannot run this model or on this profile
    (FrameworkUnsupported, BackendUnavailable, a GPU-only framework on a CPU profile, a host
    profile without its costs) is kept as a skipped curve with the reason.
    """
    if not frameworks:
        raise InvalidArgumentError("frameworks is empty; pass names such as eager,onnxruntime")
    if not batch:
        raise InvalidArgumentError("batch is empty; pass batch sizes such as 1,2,4,8")
    names = [get_framework(f).name for f in frameworks]  # unknown names fail here, first
    resolve_profile(device)  # an unknown profile fails before any framework is tried
    out = []
    for fw in dict.fromkeys(names):
        try:
            preds = predict_latency(model, fw, device, list(batch), inputs=inputs, dtype=dtype,
                                    host=host)
        except (FrameworkUnsupported, BackendUnavailable, ProfileError) as err:
            out.append(FrameworkCurve(fw, skipped=f"{type(err).__name__}: {err}"))
            continue
        except InvalidArgumentError as err:
            if "needs a GPU" not in str(err):
                raise
            out.append(FrameworkCurve(fw, skipped=str(err)))
            continue
        out.append(FrameworkCurve(fw, tuple(preds)))
    return out


def _crossover_latency_s(preds: Sequence[Prediction], x: float) -> float | None:
    """Latency at continuous batch ``x``, log-log interpolated between the predicted batches."""
    pts = sorted((p.batch, p.latency_s) for p in preds)
    for (b0, l0), (b1, l1) in zip(pts, pts[1:]):
        if b0 <= x <= b1:
            if b1 == b0:
                return l0
            t = (math.log(x) - math.log(b0)) / (math.log(b1) - math.log(b0))
            return math.exp(math.log(l0) + t * (math.log(l1) - math.log(l0)))
    return None


def plot_report(curves: Sequence[FrameworkCurve], path: str | Path, title: str) -> Path:
    """Write the figure (PNG) and return its path; needs matplotlib (the ``plot`` extra)."""
    matplotlib = require("matplotlib", "the report figure")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    drawn = [c for c in curves if c.predictions]
    if not drawn:
        raise InvalidArgumentError("no framework could be predicted; nothing to plot ("
                                   + "; ".join(f"{c.framework}: {c.skipped}" for c in curves)
                                   + ")")
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(13, 5.2))
    colors = plt.get_cmap("tab10")
    all_b = sorted({p.batch for c in drawn for p in c.predictions})
    lo, hi = all_b[0], all_b[-1]
    for i, c in enumerate(drawn):
        color = colors(i % 10)
        bs = [p.batch for p in c.predictions]
        lat = [p.latency_s * 1e3 for p in c.predictions]
        x = c.crossover_batch
        # framework-bound region: from the smallest batch to the crossover (all of it if the
        # model never leaves that regime in [1, 1024]; none if it starts compute-bound)
        bound_to: float | None = x
        if x is None and c.predictions[0].regime == "framework-bound":
            bound_to = hi
        if bound_to is not None and bound_to > lo:
            ax.axvspan(lo, min(bound_to, hi), color=color, alpha=0.08, lw=0)
        label = f"{c.framework} (crossover {'—' if x is None else f'b≈{x:.1f}'})"
        ax.plot(bs, lat, "-", color=color, lw=1.6, label=label)
        for p, y in zip(c.predictions, lat):
            ax.plot([p.batch], [y], "o", color=color, ms=5,
                    mfc="white" if p.regime == "framework-bound" else color)
        if x is not None and lo <= x <= hi:
            y_x = _crossover_latency_s(c.predictions, x)
            ax.axvline(x, color=color, ls=":", lw=1.0)
            if y_x is not None:
                ax.plot([x], [y_x * 1e3], marker="X", color=color, ms=10, mec="black", mew=0.6)
        ax2.plot(bs, [p.overhead_s * 1e3 for p in c.predictions], "--", color=color, lw=1.4,
                 label=f"{c.framework}: host overhead")
        ax2.plot(bs, [p.compute_s * 1e3 for p in c.predictions], "-", color=color, lw=1.4,
                 label=f"{c.framework}: device compute")
        if x is not None and lo <= x <= hi:
            ax2.axvline(x, color=color, ls=":", lw=1.0)
    for a in (ax, ax2):
        a.set_xscale("log", base=2)
        a.set_yscale("log")
        a.set_xlabel("batch size")
        a.set_xlim(lo / 1.15, hi * 1.15)
        a.set_xticks(all_b, [str(b) for b in all_b])
        a.minorticks_off()
        a.grid(True, which="both", alpha=0.25)
    ax.set_ylabel("predicted latency (ms)")
    ax.set_title("latency vs batch (shaded: framework-bound; ✕ crossover;\n"
                 "hollow points framework-bound, filled compute-bound)", fontsize=9)
    ax2.set_ylabel("ms")
    ax2.set_title("host overhead (dashed) vs device compute (solid)", fontsize=9)
    ax.legend(fontsize=8, loc="upper left")
    ax2.legend(fontsize=7, loc="upper left", ncol=1)
    skipped = [c for c in curves if not c.predictions]
    if skipped:
        fig.text(0.01, 0.005, "not shown: " + "; ".join(
            f"{c.framework} ({c.skipped[:90]})" for c in skipped), fontsize=6, va="bottom")
    fig.suptitle(title)
    fig.tight_layout(rect=(0, 0.03 if skipped else 0, 1, 1))
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out


def report_markdown(curves: Sequence[FrameworkCurve], title: str,
                    image: str | None = None, command: str | None = None) -> str:
    """The report as markdown: per framework, crossover batch and a row per batch."""
    lines = [f"# {title}", ""]
    if command:
        lines += [f"`{command}`", ""]
    if image:
        lines += [f"![{title}]({image})", ""]
    first = next((c.predictions[0] for c in curves if c.predictions), None)
    if first is not None:
        host = first.extra.get("host", "?")
        lines += [f"Device profile `{first.device}` ({first.extra.get('profile_kind', '?')}), "
                  f"host `{host}`, dtype {first.dtype}. Predicted, not measured.", ""]
    lines += ["| framework | crossover batch | batch | latency ms | host ms | device ms | "
              "regime | tax | launches | GMACs |",
              "|---|---:|---:|---:|---:|---:|---|---:|---:|---:|"]
    for c in curves:
        if not c.predictions:
            lines.append(f"| {c.framework} | — | — | skipped: {c.skipped[:160]} | | | | | | |")
            continue
        x = c.crossover_batch
        for j, p in enumerate(c.predictions):
            lines.append(
                f"| {c.framework if j == 0 else ''} | "
                f"{('—' if x is None else f'{x:.1f}') if j == 0 else ''} | {p.batch} | "
                f"{p.latency_s * 1e3:.3f} | {p.overhead_s * 1e3:.3f} | "
                f"{p.compute_s * 1e3:.3f} | {p.regime} | {p.framework_tax:.0%} | "
                f"{p.n_launches} | {p.macs / 1e9:.2f} |")
    warns = dict.fromkeys(w for c in curves for p in c.predictions[:1] for w in p.warnings)
    if warns:
        lines += ["", "Warnings:", ""] + [f"- {w}" for w in warns]
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class LayerRow:
    """One layer's costs (see the module docstring for what each field counts)."""

    module_path: str
    n_launches: int
    macs: int
    host_s: float
    device_s: float
    host_share: float  # host_s / (host_s + device_s)
    tax_share: float  # host_s / the model's total host overhead

    @property
    def time_s(self) -> float:
        return self.host_s + self.device_s


def layer_breakdown(prediction: Prediction, depth: int | None = None) -> list[LayerRow]:
    """The prediction's layers grouped to ``depth`` path components, most costly first."""
    if depth is not None and depth < 1:
        raise InvalidArgumentError(f"depth must be >= 1 (or None for the innermost modules), "
                                   f"got {depth!r}")
    acc: dict[str, list[float]] = {}
    for lay in prediction.layers:
        path = lay.module_path
        if depth is not None and path:
            path = ".".join(path.split(".")[:depth])
        row = acc.setdefault(path or "<root>", [0, 0, 0.0, 0.0])
        row[0] += lay.n_launches
        row[1] += lay.macs
        row[2] += lay.host_s
        row[3] += lay.device_s
    total_host = sum(r[2] for r in acc.values())
    rows = [LayerRow(p, int(r[0]), int(r[1]), r[2], r[3],
                     r[2] / (r[2] + r[3]) if r[2] + r[3] > 0 else 0.0,
                     r[2] / total_host if total_host > 0 else 0.0) for p, r in acc.items()]
    return sorted(rows, key=lambda r: r.time_s, reverse=True)


def explain_rows(prediction: Prediction, top: int = 15, depth: int | None = None
                 ) -> tuple[list[tuple[str, ...]], LayerRow]:
    """Formatted table rows of the ``top`` layers and a totals row (over all layers)."""
    if top < 1:
        raise InvalidArgumentError(f"top must be >= 1, got {top!r}")
    rows = layer_breakdown(prediction, depth)
    total = LayerRow("total (all layers)", sum(r.n_launches for r in rows),
                     sum(r.macs for r in rows), sum(r.host_s for r in rows),
                     sum(r.device_s for r in rows), 0.0, 1.0 if rows else 0.0)
    total = LayerRow(total.module_path, total.n_launches, total.macs, total.host_s,
                     total.device_s, total.host_s / total.time_s if total.time_s > 0 else 0.0,
                     total.tax_share)
    all_time = total.time_s or 1.0
    out: list[tuple[str, ...]] = [(r.module_path, f"{r.time_s * 1e3:.3f}", f"{r.time_s / all_time:.1%}",
            f"{r.host_s * 1e3:.3f}", f"{r.device_s * 1e3:.3f}", str(r.n_launches),
            f"{r.macs / 1e6:.1f}", f"{r.host_share:.0%}", f"{r.tax_share:.1%}")
           for r in rows[:top]]
    return out, total


EXPLAIN_COLUMNS = ("layer", "time ms", "of total", "host ms", "device ms", "launches", "MMACs",
                   "host share", "share of tax")
