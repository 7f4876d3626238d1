"""Host and device timelines of one Program, the closed form, the regime and the crossover.

For kernel i: host cost ``o_i`` and device time ``k_i``.

* **sync** device (CPU): host and compute share one thread, latency = per_call + Σ(o_i + k_i).
* **async** device (GPU): ``t_host += o_i; t_dev = max(t_dev, t_host + launch_latency) + k_i``;
  latency = max(t_dev, t_host) + sync.
* **closed form**: ``max(per_call + Σo, Σk)`` — the paper's piecewise framework-bound /
  compute-bound model. The regime is "framework-bound" when the host branch is the larger.
* **framework_tax**: the share of latency that device compute does not cover, 1 − Σk / latency.

Host costs: non-kernel events (module calls, torch calls, views, allocations) are spread evenly
over the kernels; each kernel adds its own ``kernel:<class>`` cost.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from scipy.optimize import brentq

from ftmodel.program import Kernel, Program
from ftmodel.hardware.profile import KIND_SCALES, FrameworkHost
from ftmodel.estimate.streaming import CONV_CLASSES
from ftmodel.tracing.formulas import MAC_CLASSES

__all__ = ["Timeline", "crossover", "device_scales", "host_costs_s", "kernel_host_costs_s",
           "kernel_kinds", "run_timeline"]


@dataclass(frozen=True)
class Timeline:
    latency_s: float
    closed_form_s: float
    overhead_s: float  # per_call + Σ o_i
    compute_s: float  # Σ k_i
    regime: str  # "framework-bound" | "compute-bound"
    framework_tax: float  # share of latency not covered by device compute
    host_s: np.ndarray  # o_i per kernel
    device_s: np.ndarray  # k_i per kernel


def kernel_kinds(kernels: Sequence[Kernel]) -> np.ndarray:
    """Each kernel's kind for the in-model device scales: 0 a convolution, 1 another MAC
    kernel (GEMMs, attention), 2 a kernel without MACs (element-wise, norms, copies, pools)."""
    return np.array([0 if k.op_class in CONV_CLASSES else 1 if k.op_class in MAC_CLASSES
                     else 2 for k in kernels], dtype=np.intp)


def device_scales(kernels: Sequence[Kernel], in_model: Mapping[str, float]) -> float | np.ndarray:
    """The in-model factor on each kernel's device time (``FrameworkHost.in_model``):
    ``device_scale`` for every kernel, or, where the fit scaled kernels by kind
    (:func:`kernel_kinds`), a convolution's ``device_scale_conv``, a kernel without MACs'
    ``device_scale_other`` and another MAC kernel's ``device_scale``."""
    scale = in_model.get("device_scale", 1.0)
    if not any(k in in_model for k in KIND_SCALES):
        return scale
    conv, other = (in_model.get(k, scale) for k in KIND_SCALES)
    by_kind: np.ndarray = np.array([conv, scale, other])[kernel_kinds(kernels)]
    return by_kind


def kernel_host_costs_s(kernels: Sequence[Kernel], host: FrameworkHost) -> np.ndarray:
    """Each kernel's own ``kernel:<class>`` host cost (``kernel:elementwise``'s for a class the
    profile does not price): the part of :func:`host_costs_s` that depends on the kernel alone."""
    per = host.per_event_s
    default_kernel = per.get("kernel:elementwise", 0.0)
    cost = {c: per.get(f"kernel:{c}", default_kernel) for c in {k.op_class for k in kernels}}
    return np.array([cost[k.op_class] for k in kernels], dtype=np.float64)


def host_costs_s(program: Program, host: FrameworkHost, warnings: list[str],
                 own: np.ndarray | None = None) -> np.ndarray:
    """o_i for each kernel: its own kernel event plus an even share of the other events.
    ``own``: :func:`kernel_host_costs_s` of the program's kernels, if already known."""
    per = host.per_event_s
    n = len(program.kernels)
    # guard events are priced by FrameworkHost.guards, or held in per_call_s without them
    missing = sorted({e for e, c in program.host_events.items() if c and e not in per
                      and not e.startswith(("kernel:", "guard:"))})
    if missing:
        warnings.append(f"host profile prices no {', '.join(missing)} events; counted as free")
    if own is None:
        own = kernel_host_costs_s(program.kernels, host)
    shared = sum(c * per.get(e, 0.0) for e, c in program.host_events.items()
                 if not e.startswith("kernel:"))
    if n == 0:
        return own
    return own + shared / n


def run_timeline(host_s: np.ndarray, device_s: np.ndarray, *, execution: str,
                 per_call_s: float = 0.0, launch_latency_s: float = 0.0,
                 sync_s: float = 0.0) -> Timeline:
    overhead = per_call_s + float(host_s.sum())
    compute = float(device_s.sum())
    if execution == "sync":
        latency = overhead + compute
    else:
        t_host, t_dev = per_call_s, 0.0
        for o, k in zip(host_s.tolist(), device_s.tolist()):
            t_host += o
            t_dev = max(t_dev, t_host + launch_latency_s) + k
        latency = max(t_dev, t_host) + sync_s
    closed = max(overhead, compute)
    regime = "framework-bound" if overhead >= compute else "compute-bound"
    tax = 1.0 - compute / latency if latency > 0 else 0.0
    return Timeline(latency, closed, overhead, compute, regime, max(0.0, tax), host_s, device_s)


def crossover(overhead_at: Callable[[float], float], compute_at: Callable[[float], float],
              lo: float = 1.0, hi: float = 1024.0) -> float | None:
    """The batch b in [lo, hi] where compute(b) = overhead(b), by root finding; None if none.

    ``overhead_at`` and ``compute_at`` are the predicted curves over continuous batch.
    """
    def f(b: float) -> float:
        return compute_at(b) - overhead_at(b)
    grid = np.geomspace(lo, hi, 41)
    vals = [f(b) for b in grid]
    if vals[0] >= 0:
        return None  # compute-bound from the start
    for a, b, fa, fb in zip(grid[:-1], grid[1:], vals[:-1], vals[1:]):
        if fa < 0 <= fb:
            return float(brentq(f, a, b, xtol=1e-3))
    return None
