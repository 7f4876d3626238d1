"""Live validation: measure a model on this machine and predict it, in the same run.

``compare_live(model, make_inputs, batches, profile, framework)`` measures each batch with the
robust protocol of :mod:`ftmodel.measure` (fixed threads, warm-up, interleaved rounds, fastest
round's median) and predicts it with the given profile. Eager calls the model directly; a
framework with a runner (onnxruntime, torchscript, inductor) is measured with the very artifact
its lowering counted (``Framework.runner``): the predictions are made first, so the runner
reuses the cached artifact (session, frozen module, compiled module) that was counted.
Frameworks that need a GPU cannot be measured on a CPU.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from scipy.stats import spearmanr
from torch import nn

from ftmodel.api import Predictor
from ftmodel.errors import InvalidArgumentError
from ftmodel.frameworks.base import Framework, artifact_room
from ftmodel.measure import measure_interleaved
from ftmodel.tracing.inputs import InputSpec, ModelInputs, resolve_inputs

__all__ = ["LivePoint", "LiveModel", "compare_live", "compare_live_many", "eager_call",
           "framework_call", "summarize", "macs_proxy"]


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


def eager_call(model: nn.Module, inp: ModelInputs) -> Callable[[], object]:
    """A zero-argument callable running one eager forward of ``model`` on ``inp`` (no_grad)."""
    def run() -> object:
        with torch.no_grad():
            return model(*inp.args, **inp.kwargs)
    return run


def framework_call(framework: Framework, model: nn.Module, inputs: InputSpec,
                   batch: int) -> Callable[[], object]:
    """A zero-argument callable running ``model`` once at ``batch`` on the CPU as a user of
    ``framework`` would: the artifact its runner builds (the compiled module, the ONNX Runtime
    session, ...), or for eager the module itself (:func:`eager_call`)."""
    if framework.runner is not None:
        return framework.runner(model, inputs, batch)
    return eager_call(model, resolve_inputs(model, inputs, batch))


def _limits(framework: Framework) -> contextlib.AbstractContextManager[Any]:
    if framework.name != "inductor":
        return contextlib.nullcontext()
    import torch._dynamo.config as cfg
    # one compiled module per batch shares one forward code object
    return cfg.patch(recompile_limit=64)  # type: ignore[no-any-return]


@dataclass(frozen=True)
class LiveModel:
    """One model to validate: its name, the module and how to make its inputs for a batch."""

    name: str
    model: nn.Module
    make_inputs: Callable[[int], Any]


def compare_live_many(models: Sequence[LiveModel], batches: Sequence[int],
                      predictor: Predictor, *, rounds: int = 5, round_s: float = 0.1,
                      on_skip: Callable[[str, Exception], None] | None = None
                      ) -> list[LivePoint]:
    """Predict every model × batch, then measure all of them in the same interleaved rounds.

    Interleaving every point of every model in each round spreads a slow phase of the machine
    over all points, so the fastest round of each point is a quiet one. A model the framework
    cannot run (FrameworkUnsupported, BackendUnavailable) is passed to ``on_skip`` (or raised
    when ``on_skip`` is None) and left out.
    """
    fw = predictor.framework
    device = predictor.profile.device.type  # "cpu" or "cuda": where the points are measured
    if fw.needs_gpu and device == "cpu":
        raise InvalidArgumentError(f"framework {fw.name!r} cannot be measured on this CPU")
    if device == "cuda" and not torch.cuda.is_available():
        raise InvalidArgumentError(
            f"profile {predictor.profile.name!r} is a GPU profile, and live measurement needs "
            "that GPU: this machine has no CUDA device; validate on the GPU, or pass a CPU "
            "profile")
    from ftmodel.errors import BackendUnavailable, FrameworkUnsupported

    preds: dict[tuple[str, int], Any] = {}
    fns: dict[tuple[str, int], Callable[[], object]] = {}
    kept: list[LiveModel] = []
    # room for every batch's artifact, with a few to spare
    with artifact_room(fw.name, len(batches) + 3), _limits(fw):
        for lm in models:
            model = lm.model.eval()
            try:
                # the runners first: a framework's artifact built to run also serves the
                # prediction's lowering
                if fw.runner is not None:
                    for b in batches:
                        fns[(lm.name, b)] = fw.runner(model, lm.make_inputs, b, device=device,
                                                      dtype=predictor.dtype)
                for b, p in zip(batches, predictor.predict(model, list(batches),
                                                           lm.make_inputs)):
                    preds[(lm.name, b)] = p
                if fw.runner is None:  # eager: the module itself, on the profile's device
                    model = model.to(device)
                    for b in batches:
                        fns[(lm.name, b)] = eager_call(model, resolve_inputs(
                            model, lm.make_inputs(b), b).map(lambda t: t.to(device)))
            except (FrameworkUnsupported, BackendUnavailable) as err:
                if on_skip is None:
                    raise
                on_skip(lm.name, err)
                for b in batches:
                    preds.pop((lm.name, b), None)
                    fns.pop((lm.name, b), None)
                continue
            kept.append(lm)
        measured = measure_interleaved(fns, device=device, rounds=rounds, round_s=round_s,
                                       warmup=2, max_reps=50, settle_s=fw.settle_s)
    out = []
    for lm in kept:
        n_params = sum(p.numel() for p in lm.model.parameters())
        for b in batches:
            p, m = preds[(lm.name, b)], measured[(lm.name, b)]
            out.append(LivePoint(lm.name, fw.name, b, m.time_s, m.spread, p.latency_s,
                                 p.overhead_s, p.compute_s, p.regime, p.macs, p.n_launches,
                                 n_params))
    return out


def compare_live(name: str, model: nn.Module, make_inputs: Callable[[int], Any],
                 batches: Sequence[int], predictor: Predictor, *, rounds: int = 5,
                 round_s: float = 0.1) -> list[LivePoint]:
    """Measure and predict one model at each batch, with the framework's runner if it has one.

    Raises FrameworkUnsupported (from the prediction) when the framework cannot run the model.
    """
    return compare_live_many([LiveModel(name, model, make_inputs)], batches, predictor,
                             rounds=rounds, round_s=round_s)


def macs_proxy(points: Sequence[LivePoint]) -> np.ndarray:
    """The baseline: latency = a + b·MACs, least squares on the same points; its predictions."""
    macs = np.array([p.macs for p in points], dtype=float)
    y = np.array([p.measured_s for p in points])
    a = np.stack([np.ones_like(macs), macs], axis=1)
    coef, *_ = np.linalg.lstsq(a, y, rcond=None)
    fitted: np.ndarray = np.maximum(a @ coef, 1e-9)
    return fitted


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
