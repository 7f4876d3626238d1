"""Which framework is fastest for a model on a device, per batch size (prediction only).

    from ftmodel import compare_frameworks
    table = compare_frameworks(model, "rtx8000", [1, 8, 64])   # model, device, batch
    table.fastest(1)             # -> "onnxruntime"
    table.rows()                 # one row per batch: each framework's latency and regime

Each framework is predicted with :class:`ftmodel.api.Predictor` on the same profile and host. A
framework that cannot run the model (:class:`~ftmodel.errors.FrameworkUnsupported`) or needs what
this machine or the profile lacks (:class:`~ftmodel.errors.BackendUnavailable`, or CUDA graphs
asked of a CPU profile, or host costs the profile lacks) is listed with its reason, and the others are still compared. Nothing is
measured; ``ftmodel validate`` and ``benchmarks/validate.py`` do that.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from torch import nn

from ftmodel.api import DeviceSpec, HostSpec, Prediction, Predictor, resolve_profile
from ftmodel.deprecation import renamed
from ftmodel.errors import (BackendUnavailable, FrameworkUnsupported, InvalidArgumentError,
                            ProfileError)
from ftmodel.frameworks.base import canonical_framework, framework_names
from ftmodel.tracing.inputs import InputSpec

__all__ = ["FrameworkComparison", "compare_frameworks", "default_frameworks"]



def default_frameworks(device_type: str) -> tuple[str, ...]:
    """The frameworks compared by default on a device of this type ("cpu" or "cuda")."""
    return framework_names(device_type)


@dataclass
class FrameworkComparison:
    """Predictions of several frameworks for one model, device and list of batch sizes."""

    device: str
    batches: tuple[int, ...]
    predictions: dict[str, list[Prediction]]  # framework -> one Prediction per batch
    unavailable: dict[str, str] = field(default_factory=dict)  # framework -> why not

    def fastest(self, batch: int) -> str | None:
        """The framework with the lowest predicted latency at ``batch`` (None if none ran)."""
        i = self._index(batch)
        best = min(self.predictions.items(), key=lambda kv: kv[1][i].latency_s, default=None)
        return best[0] if best else None

    def rows(self) -> list[dict[str, Any]]:
        """One dict per batch: ``batch``, ``fastest``, and per framework ``<fw>_ms`` and
        ``<fw>_regime``."""
        out = []
        for i, b in enumerate(self.batches):
            row: dict[str, Any] = {"batch": b, "fastest": self.fastest(b)}
            for fw, preds in self.predictions.items():
                row[f"{fw}_ms"] = preds[i].latency_s * 1e3
                row[f"{fw}_regime"] = preds[i].regime
            out.append(row)
        return out

    def _index(self, batch: int) -> int:
        if batch not in self.batches:
            raise InvalidArgumentError(f"batch {batch} was not compared; compared batches: "
                                       f"{list(self.batches)}")
        return self.batches.index(batch)


def compare_frameworks(model: nn.Module, device: DeviceSpec = "auto",
                       batch: int | Sequence[int] = (1, 8, 32), *,
                       frameworks: Sequence[str] | None = None, inputs: InputSpec = None,
                       dtype: str = "fp32", host: HostSpec | None = None,
                       gpu: DeviceSpec | None = None) -> FrameworkComparison:
    """Predict ``model`` under each framework (default: all that fit the device type) on
    ``device`` for every batch in ``batch``; see the module docstring (``gpu=``: the deprecated
    spelling of ``device=``). Raises the first framework's error when no framework can predict
    the model at all."""
    device = renamed("device", device, "auto", "gpu", gpu)
    profile = resolve_profile(device)
    batches = (batch,) if isinstance(batch, int) else tuple(batch)
    if not batches:
        raise InvalidArgumentError("batch is empty; give at least one batch size, e.g. [1, 8]")
    fws = tuple(frameworks) if frameworks else default_frameworks(profile.device.type)
    for fw in fws:
        canonical_framework(fw)  # an unknown name is an error, not an unavailable framework
    errors: list[Exception] = []
    predictions: dict[str, list[Prediction]] = {}
    unavailable: dict[str, str] = {}
    for fw in fws:
        try:
            predictor = Predictor(fw, profile, host=host, dtype=dtype)
            predictions[predictor.framework.name] = predictor.predict(model, list(batches),
                                                                      inputs)
        except (FrameworkUnsupported, BackendUnavailable, InvalidArgumentError,
                ProfileError) as err:
            # e.g. FFT under ONNX, CUDA graphs on a CPU profile, a runtime not installed, a
            # calibrated profile without that framework's host costs
            unavailable[fw] = str(err).splitlines()[0]
            errors.append(err)
    if not predictions:
        raise errors[0]
    return FrameworkComparison(profile.name, batches, predictions, unavailable)
