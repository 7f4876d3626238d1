"""Live validation: measure a model on this machine and predict it, in the same run.

``compare_live(model, make_inputs, batches, profile, framework)`` measures each batch with the
robust protocol of :mod:`ftmodel.measure` (fixed threads, warm-up, interleaved rounds, fastest
round's median) and predicts it with the given profile. Only frameworks that can run here are
measured (eager on the CPU in this version).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from scipy.stats import spearmanr
from torch import nn

from ftmodel.api import Predictor
from ftmodel.measure import measure_interleaved
from ftmodel.tracing.inputs import ModelInputs, resolve_inputs

__all__ = ["LivePoint", "compare_live", "summarize", "macs_proxy"]


@dataclass(frozen=True)
class LivePoint:
    model: str
    framework: str
    batch: int
    measured_s: float
    spread: float
    predicted_s: float
    overhead_s: float
    compute_s: float
    regime: str
    macs: int
    n_launches: int
    params: int

    @property
    def ape(self) -> float:
        return abs(self.predicted_s - self.measured_s) / self.measured_s


def _call(model: nn.Module, inp: ModelInputs) -> Callable[[], object]:
    def run() -> object:
        with torch.no_grad():
            return model(*inp.args, **inp.kwargs)
    return run


def compare_live(name: str, model: nn.Module, make_inputs: Callable[[int], Any],
                 batches: Sequence[int], predictor: Predictor, *, rounds: int = 3,
                 round_s: float = 0.15) -> list[LivePoint]:
    """Measure and predict ``model`` at each batch (eager on the CPU)."""
    model = model.eval()
    inputs = {b: resolve_inputs(model, make_inputs(b), b) for b in batches}
    fns = {b: _call(model, inputs[b]) for b in batches}
    measured = measure_interleaved(fns, rounds=rounds, round_s=round_s, warmup=2, max_reps=50)
    preds = predictor.predict(model, list(batches), make_inputs)
    n_params = sum(p.numel() for p in model.parameters())
    return [LivePoint(name, predictor.framework.name, b, measured[b].time_s, measured[b].spread,
                      p.latency_s, p.overhead_s, p.compute_s, p.regime, p.macs, p.n_launches,
                      n_params)
            for b, p in zip(batches, preds)]


def macs_proxy(points: Sequence[LivePoint]) -> np.ndarray:
    """The baseline: latency = a + b·MACs, least squares on the same points; its predictions."""
    macs = np.array([p.macs for p in points], dtype=float)
    y = np.array([p.measured_s for p in points])
    a = np.stack([np.ones_like(macs), macs], axis=1)
    coef, *_ = np.linalg.lstsq(a, y, rcond=None)
    return np.maximum(a @ coef, 1e-9)


def _stats(pred: np.ndarray, meas: np.ndarray) -> dict[str, float]:
    ape = np.abs(pred - meas) / meas
    return {
        "median_ape": float(np.median(ape)),
        "p90_ape": float(np.percentile(ape, 90)),
        "within_20pct": float(np.mean(ape <= 0.20)),
        "spearman": float(spearmanr(pred, meas).statistic),
    }


def summarize(points: Sequence[LivePoint]) -> dict[str, dict[str, float]]:
    """ftmodel and the MACs-proxy baseline on the same points."""
    meas = np.array([p.measured_s for p in points])
    pred = np.array([p.predicted_s for p in points])
    out = {"ftmodel": _stats(pred, meas), "macs_proxy": _stats(macs_proxy(points), meas)}
    out["ftmodel"]["n_points"] = float(len(points))
    out["ftmodel"]["median_spread"] = float(np.median([p.spread for p in points]))
    return out
