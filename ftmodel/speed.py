"""The machine's speed while it is measured: a fixed reference GEMM timed between measurements.

A shared virtual machine changes speed by 30-100% within seconds (a neighbour's load, frequency
steps). On the 2-vCPU Xeon this library is validated on, the reference GEMM below took 0.64-1.12
ms in six probes over one minute, and across six fresh processes a model's time followed the
reference GEMM timed beside it (correlation 0.86-0.94 for ResNet-34 at batch 16 and a GPT-2-style
decoder at batches 1 and 16, 0.54 for ResNet-34 at batch 1): scaled by it, the processes'
coefficient of variation fell from 13-20% to 8-9% (16% to 13% for ResNet-34 at batch 1). A calibration that times its op curves in one phase of the machine and its
in-model networks in another fits the difference into its scales.

:class:`SpeedMeter` times the reference (``REFERENCE_SHAPE``, fp32, the median of a few calls)
and holds a *nominal* reference time. Inside :func:`speed_normalised`,
:func:`ftmodel.measure.measure_interleaved` and :func:`ftmodel.measure.measure_cold_interleaved`
time the reference before and after each block of calls (at most every
``REFERENCE_INTERVAL_S``) and scale every round's median by ``nominal / reference`` (the
geometric mean of the two references around it): all measurements of a calibration are then
expressed at one machine speed, the nominal one, which the profile records
(``provenance.speed``). Other timings call :func:`at_nominal_speed`.

What this assumes: a slower phase slows the host's Python and dispatch work and the device's
kernels alike (steal time and frequency do; contention for memory bandwidth would slow
memory-bound kernels more than the GEMM). Only a CPU device is normalised: a GPU's own speed
does not move with the host VM's.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import torch

__all__ = ["REFERENCE_SHAPE", "REFERENCE_INTERVAL_S", "SpeedMeter", "active_meter",
           "at_nominal_speed", "nominal_reference_s", "reference_gemm", "speed_normalised"]

REFERENCE_SHAPE = (64, 1024, 1024)  # (m, k, n): a 64x1024 by 1024x1024 fp32 GEMM
REFERENCE_INTERVAL_S = 0.1  # at most this long between two references inside a measurement
_REFERENCE_CALLS = 8  # a reference time is the median of this many calls (~5-10 ms on a CPU)
_NOMINAL_PROBES = 20  # the nominal time is the median of this many references ...
_NOMINAL_GAP_S = 0.1  # ... this far apart (about 2-3 s in all)


def reference_gemm(device: str = "cpu") -> Callable[[], object]:
    """The reference workload on ``device``: one ``REFERENCE_SHAPE`` fp32 GEMM per call."""
    m, k, n = REFERENCE_SHAPE
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(m, k, generator=gen).to(device)
    b = torch.randn(k, n, generator=gen).to(device)
    return lambda: torch.mm(a, b)


def nominal_reference_s(provenance: Mapping[str, Any]) -> float | None:
    """The reference time a profile's measurements were scaled to (``provenance.speed``), or
    None for a profile measured without a meter."""
    speed = provenance.get("speed")
    if isinstance(speed, Mapping) and speed.get("normalised") and speed.get("reference_s"):
        return float(speed["reference_s"])
    return None


class SpeedMeter:
    """Times the reference GEMM on a CPU and holds the nominal time measurements are scaled to.

    ``nominal_s``: the reference time that stands for "this machine's speed" (a profile being
    updated passes its own); without it, the median of ``_NOMINAL_PROBES`` references taken over
    a few seconds now. ``seen_s`` keeps every reference time taken, for the provenance."""

    def __init__(self, device: str = "cpu", nominal_s: float | None = None) -> None:
        if device != "cpu":
            raise ValueError(f"the speed meter measures a CPU, got device {device!r}")
        self.device = device
        self._call = reference_gemm(device)
        for _ in range(3):
            self._call()
        self.seen_s: list[float] = []
        self._last_at = -math.inf
        if nominal_s is None:
            probes = []
            for _ in range(_NOMINAL_PROBES):
                probes.append(self.reference_s())
                time.sleep(_NOMINAL_GAP_S)
            nominal_s = statistics.median(probes)
        if not nominal_s > 0:
            raise ValueError(f"nominal reference time must be positive, got {nominal_s!r}")
        self.nominal_s = float(nominal_s)

    def reference_s(self) -> float:
        """Seconds of one reference GEMM now (median of ``_REFERENCE_CALLS`` calls)."""
        times = []
        for _ in range(_REFERENCE_CALLS):
            t0 = time.perf_counter()
            self._call()
            times.append(time.perf_counter() - t0)
        self._last_at = time.perf_counter()
        t = statistics.median(times)
        self.seen_s.append(t)
        return t

    def due(self) -> bool:
        """Whether ``REFERENCE_INTERVAL_S`` has passed since the last reference."""
        return time.perf_counter() - self._last_at >= REFERENCE_INTERVAL_S

    def factor(self, before_s: float, after_s: float) -> float:
        """``nominal / reference`` for a measurement between two references."""
        return self.nominal_s / math.sqrt(before_s * after_s)

    def summary(self) -> dict[str, Any]:
        """What a profile's provenance records: the nominal time and the references seen."""
        seen = self.seen_s or [self.nominal_s]
        return {"reference_s": self.nominal_s, "shape": list(REFERENCE_SHAPE),
                "normalised": True, "references": len(self.seen_s),
                "min_s": min(seen), "median_s": statistics.median(seen), "max_s": max(seen)}


_ACTIVE: ContextVar[SpeedMeter | None] = ContextVar("ftmodel_speed_meter", default=None)


@contextmanager
def speed_normalised(meter: SpeedMeter | None) -> Iterator[SpeedMeter | None]:
    """Within the block, CPU measurements are scaled to ``meter``'s nominal speed (``None``:
    no scaling, for a caller that normalises only sometimes)."""
    token = _ACTIVE.set(meter)
    try:
        yield meter
    finally:
        _ACTIVE.reset(token)


def active_meter(device: str) -> SpeedMeter | None:
    """The meter in force for measurements on ``device``, if any."""
    meter = _ACTIVE.get()
    return meter if meter is not None and meter.device == device else None


def at_nominal_speed(timed: Callable[[], float], device: str = "cpu") -> float:
    """``timed()`` (seconds measured on ``device``), scaled to the nominal speed when a meter
    is in force (references taken right before and after it), else as measured."""
    meter = active_meter(device)
    if meter is None:
        return timed()
    before = meter.reference_s()
    t = timed()
    return t * meter.factor(before, meter.reference_s())
