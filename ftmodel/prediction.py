"""What a prediction returns: :class:`Prediction` with its :class:`LayerCost` per module, and
:class:`KernelArrays`, the per-kernel arrays :meth:`ftmodel.api.Predictor.timeline` can reuse."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

__all__ = ["KernelArrays", "LayerCost", "Prediction"]


class KernelArrays(NamedTuple):
    """Per kernel of a program, what :meth:`Predictor.kernel_arrays` computes from the kernels
    alone (the input of :meth:`Predictor.timeline`):
    device seconds (:meth:`Predictor.device_times_s`), own host seconds
    (:func:`~ftmodel.estimate.timeline.kernel_host_costs_s`), bytes moved and
    :func:`~ftmodel.program.entry_launches`."""

    device_s: np.ndarray
    own_host_s: np.ndarray
    bytes_total: np.ndarray
    entry: np.ndarray  # 1.0 for a kernel the Python code launched, 0.0 for Kernel.inner
    warnings: tuple[str, ...] = ()  # raised while pricing the kernels


@dataclass(frozen=True)
class LayerCost:
    """Predicted cost of one module path (kernels attributed to their innermost module)."""

    module_path: str
    n_launches: int
    macs: int
    host_s: float
    device_s: float


@dataclass(frozen=True)
class Prediction:
    """A latency prediction for one model, framework, device and batch size."""

    framework: str
    device: str
    batch: int
    dtype: str
    latency_s: float
    overhead_s: float  # host time: framework dispatch, module calls, launches
    compute_s: float  # summed device kernel time
    closed_form_s: float  # max(overhead_s, compute_s)
    regime: str  # "framework-bound" | "compute-bound"
    framework_tax: float  # share of latency not covered by device compute
    n_launches: int
    macs: int
    crossover_batch: float | None
    layers: tuple[LayerCost, ...] = ()
    warnings: tuple[str, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict)
    heap: str = "kept"  # the malloc state modelled: "plain" (glibc's defaults) or "kept"
    page_faults: float = 0.0  # minor page faults per forward pass counted in overhead_s
    # a decode step (inputs=ftmodel.inputs.decode(...)): tokens already in each sequence's KV
    # cache; None for an ordinary forward pass
    decode_context: int | None = None

    @property
    def latency_ms(self) -> float:
        return self.latency_s * 1e3

    @property
    def tokens_per_s(self) -> float | None:
        """For a decode step, tokens generated per second: one per sequence (``batch``) per
        step; None for an ordinary forward pass."""
        if self.decode_context is None:
            return None
        return self.batch / self.latency_s if self.latency_s > 0 else float("inf")

    def as_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in (
            "framework", "device", "batch", "dtype", "latency_s", "overhead_s", "compute_s",
            "closed_form_s", "regime", "framework_tax", "n_launches", "macs", "crossover_batch",
            "heap", "page_faults", "decode_context", "tokens_per_s")}
