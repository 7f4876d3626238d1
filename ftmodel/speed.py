"""The machine's speed while it is measured: a fixed reference GEMM and a host reference timed
between measurements.

A shared virtual machine changes speed by 30-100% within seconds (a neighbour's load, frequency
steps). On the 2-vCPU Xeon this library is validated on, the reference GEMM below took 0.64-1.12
ms in six probes over one minute, and across six fresh processes a model's time followed the
reference GEMM timed beside it (correlation 0.86-0.94 for ResNet-34 at batch 16 and a GPT-2-style
decoder at batches 1 and 16, 0.54 for ResNet-34 at batch 1): scaled by it, the processes'
coefficient of variation fell from 13-20% to 8-9% (16% to 13% for ResNet-34 at batch 1). A
calibration that times its op curves in one phase of the machine and its in-model networks in
another fits the difference into its scales.

:class:`SpeedMeter` times the reference (``REFERENCE_SHAPE``, fp32, the median of a few calls)
and holds a *nominal* reference time. Inside :func:`speed_normalised`,
:func:`ftmodel.measure.measure_interleaved` and :func:`ftmodel.measure.measure_cold_interleaved`
time the reference before and after each block of calls (at most every
``REFERENCE_INTERVAL_S``) and express each time at ``nominal / reference`` (the fastest round
over the fastest reference around the rounds, :func:`ftmodel.measure.fastest_over_fastest`):
all measurements of a calibration are then expressed at one machine speed, the nominal one,
which the profile records (``provenance.speed``). Other timings call
:func:`at_nominal_speed`.

Host work does not follow the GEMM. A meter also times a *host reference* beside each GEMM
reference (``HOST_REFERENCE_CALLS`` ``nn.ReLU`` module calls on a 4-element tensor: Python,
module calls and the dispatcher, no arithmetic to speak of) and holds a nominal time for it. On
the Xeon, over ten passes in five fresh processes, the two references' times correlated at 0.54
(log scale; CV 0.18 for the GEMM, 0.29 for the host reference). A measurement given a *host
share* (the part of its time that is host work: 1 for a tiny-op program, a network's predicted
host time over its total) is scaled by ``share × host factor + (1 − share) × GEMM factor``: the
calibration's synthetic networks at batch 1 then varied between passes by 3.4% (standard
deviation of the pass's median log ratio) against 7.8% scaled by the GEMM alone (batch 4: 3.9
against 7.2%; the tiny-op host programs 14 against 19%), ``benchmarks/speed_references.py``.
The host reference has two speeds on that VM (about 140 and 250 µs, each held for tens of
seconds); :meth:`SpeedMeter.typical` gives the speed a finished calibration is re-expressed
at: the GEMM references' median and the host references' 10th percentile.

Kernels do not all follow the GEMM either. A meter also times a *memory reference*
(:func:`reference_memory`: one copy of ``MEMORY_REFERENCE_BYTES`` into a buffer kept between
calls, read and written once each, about a 32 MiB L3's worth). On the 2-vCPU AMD EPYC (Zen 3)
guest, over five minutes of passes (``benchmarks/speed_kernels.py``, 461 passes; results in
``benchmarks/results/cpu-epyc-milan/speed-kernels.md``), the GEMM and memory references moved
independently (correlation of their logs -0.15) and each kernel's time followed a blend of the
two: scaled by ``w × GEMM factor + (1 − w) × memory factor``, a 64 MiB add repeated best at
``w`` = 0 (standard deviation of its log time 0.10, 0.38 scaled by the GEMM alone), LayerNorm and
a depthwise convolution at 0.25 (0.10-0.11 against 0.28-0.32), a 3x3 convolution, softmax and
max pooling at 0.5 (0.11-0.14 against 0.23-0.25), a 256x1024x1024 GEMM at 0.75 (0.095 against
0.14; a 1 MiB add, cache-resident, at 0.25). :func:`gemm_share` gives each op class the ``w``
of the kernel of its kind in that measurement (matrix products 0.75; elementwise ops, copies,
embeddings and reductions 0, as the large add; others 0.5). A calibration's op-curve samples
are scaled by their class's blend (:meth:`SpeedMeter.factor`'s ``gemm_share``; a profile
records ``provenance.speed.memory_normalised``), and a finished one is re-expressed at the
memory references' median as well. Profiles measured before this kept every device time on
the GEMM. Timed in three passes a minute apart on that guest (``benchmarks/sweep_estimators.py``,
``sweep-estimators.md`` there), the samples of eight op classes moved between passes less scaled
by the class blend than by the GEMM alone, in every class (a class's offset 2.5-43% against
13-68%); the fastest round left unscaled moved least in six of the eight (3.5-16%), so in that
machine state the references themselves were the larger noise.

Nor do kernels move in proportion to their references. On that guest a kernel's time followed
its two references with exponents summing to 0.25-0.84 (median 0.57, ``speed-kernels.md``), the
corpus's processes moved by 0.46 of the references' log change (``corpus-calibration-53-run2``),
and calibrations from a slow and a fast phase agreed best re-expressed with the references moved
half to three quarters of the way (``profile-agreement.md``). Scaled in proportion, a
measurement taken far from the nominal speed is over-corrected: profile 54's ONNX Runtime curves,
measured with the reference GEMM at a median 1.86 ms and scaled to a nominal 3.22 ms, priced the
held-out corpus 1.30x high at the calibration's speed. So device times move by their blended
factor to the power :data:`DEVICE_SPEED_EXPONENT` (0.5); host times, whose calibrations agreed
best in proportion, move by theirs. A profile records the exponent its calibration used
(``provenance.speed.device_exponent``; none recorded: 1), and re-expressing it
(:func:`ftmodel.hardware.rescale.at_speed`, ``speed="now"``) uses the same one.

Only a CPU device is normalised: a GPU's own speed does not move with the host VM's.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from ftmodel.speed_record import (device_speed_exponent, memory_normalised,
                                  nominal_host_reference_s, nominal_memory_reference_s,
                                  nominal_reference_s)

__all__ = ["HOST_REFERENCE_CALLS", "HOST_TYPICAL_QUANTILE", "MEMORY_REFERENCE_BYTES",
           "DEVICE_SPEED_EXPONENT", "device_speed_exponent", "gemm_share", "memory_normalised",
           "REFERENCE_SHAPE", "REFERENCE_INTERVAL_S", "Reference",
           "SpeedMeter", "active_meter", "at_nominal_speed", "blended", "median_of_calls",
           "nominal_host_reference_s", "nominal_memory_reference_s",
           "nominal_reference_s", "reference_gemm", "reference_host", "reference_memory",
           "speed_normalised"]

REFERENCE_SHAPE = (64, 1024, 1024)  # (m, k, n): a 64x1024 by 1024x1024 fp32 GEMM
HOST_REFERENCE_CALLS = 40  # nn.ReLU module calls in the host reference (~0.1-0.2 ms on a CPU)
# a host reference's speed has two states on a shared VM (on the Xeon ~140 and ~250 µs, each
# held for tens of seconds): the median of a run's references lands in either, its 10th
# percentile in the fast one (137-149 µs over five processes whose medians were 142-258 µs)
HOST_TYPICAL_QUANTILE = 0.10
# the memory reference's copy: 16 MiB read and 16 MiB written per call (a ~32 MiB last-level
# cache's worth; 0.3-1.3 ms on the 2-vCPU EPYC guests)
MEMORY_REFERENCE_BYTES = 16 * 2**20
_MEMORY_REFERENCE_CALLS = 4  # a memory reference is the median of this many calls
# each op class's share of the GEMM reference in its speed (the rest follows the memory
# reference); see the module docstring for the measurement. Classes not named here: 0.5.
_GEMM_SHARE = {"gemm": 0.75, "bmm": 0.75, "attention": 0.75,
               "conv": 0.5, "softmax": 0.5, "pool": 0.5,
               "conv_grouped": 0.25, "norm": 0.25,
               "elementwise": 0.0, "copy": 0.0, "embedding": 0.0, "reduction": 0.0}
_DEFAULT_GEMM_SHARE = 0.5
# device times move by their references' factor to this power (see the module docstring):
# calibrations since 2026-11-29 scale their device measurements so and record it
# (``provenance.speed.device_exponent``); profiles without the record moved in proportion (1)
DEVICE_SPEED_EXPONENT = 0.5
REFERENCE_INTERVAL_S = 0.1  # at most this long between two references inside a measurement
_REFERENCE_CALLS = 8  # a reference time is the median of this many calls (~6-10 ms on a CPU)
_NOMINAL_PROBES = 20  # the nominal time is the median of this many references ...
_NOMINAL_GAP_S = 0.1  # ... this far apart (about 2-3 s in all)


def reference_gemm(device: str = "cpu") -> Callable[[], object]:
    """The reference workload on ``device``: one ``REFERENCE_SHAPE`` fp32 GEMM per call."""
    m, k, n = REFERENCE_SHAPE
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(m, k, generator=gen).to(device)
    b = torch.randn(k, n, generator=gen).to(device)
    return lambda: torch.mm(a, b)


def reference_host(device: str = "cpu") -> Callable[[], object]:
    """The host reference on ``device``: ``HOST_REFERENCE_CALLS`` chained ``nn.ReLU`` module
    calls on a 4-element tensor per call (host work: Python, module calls, the dispatcher)."""
    chain = nn.Sequential(*[nn.ReLU() for _ in range(HOST_REFERENCE_CALLS)])
    x = torch.ones(4, device=device)
    return lambda: chain(x)


def reference_memory(device: str = "cpu") -> Callable[[], object]:
    """The memory reference on ``device``: one copy of ``MEMORY_REFERENCE_BYTES`` of fp32 into
    a buffer allocated once (no allocation or page fault inside the call)."""
    src = torch.randn(MEMORY_REFERENCE_BYTES // 4, generator=torch.Generator().manual_seed(0))
    src = src.to(device)
    dst = torch.empty_like(src)
    return lambda: dst.copy_(src)


@dataclass(frozen=True)
class Reference:
    """One reading of the machine's speed: the reference GEMM's seconds, the host reference's
    and the memory reference's (None for a meter that times no such reference)."""

    gemm_s: float
    host_s: float | None = None
    memory_s: float | None = None


def gemm_share(op_class: str) -> float:
    """How much of an ``op_class`` kernel's speed follows the reference GEMM (0-1); the rest
    follows the memory reference. ``op_class`` may carry ``@op`` and ``:variant`` suffixes."""
    base = op_class.split(":")[0].split("@")[0]
    return _GEMM_SHARE.get(base, _DEFAULT_GEMM_SHARE)


def median_of_calls(call: Callable[[], object], calls: int = _REFERENCE_CALLS) -> float:
    """Seconds of one call of ``call``: the median of ``calls`` timed calls."""
    times = []
    for _ in range(calls):
        t0 = time.perf_counter()
        call()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def blended(gemm_factor: float, host_factor: float, host_share: float) -> float:
    """The factor for a time whose ``host_share`` is host work: ``share × host + (1 − share) ×
    GEMM``."""
    return host_share * host_factor + (1.0 - host_share) * gemm_factor


class SpeedMeter:
    """Times the reference GEMM (and the host reference) on a CPU and holds the nominal times
    measurements are scaled to.

    ``nominal_s``: the reference GEMM time that stands for "this machine's speed" (a profile
    being updated passes its own); without it, the median of ``_NOMINAL_PROBES`` references
    taken over a few seconds now, and likewise the host reference's nominal time.
    ``nominal_host_s``: the host reference's nominal time when ``nominal_s`` is given; None
    there means no host reference (every measurement scaled by the GEMM, as profiles measured
    before it was introduced are). ``seen_s`` and ``seen_host_s`` keep every reference taken,
    for the provenance. ``nominal_memory_s``: likewise for the memory reference (recorded, not
    scaled by; a meter given ``nominal_s`` without it times none); ``seen_memory_s`` keeps its
    readings. ``device_exponent``: a device time moves by its references' factor to this power
    (:data:`DEVICE_SPEED_EXPONENT`; a profile being updated passes its own, 1 for one measured
    before it); host times move in proportion."""

    def __init__(self, device: str = "cpu", nominal_s: float | None = None,
                 nominal_host_s: float | None = None,
                 nominal_memory_s: float | None = None,
                 normalise_memory: bool | None = None,
                 device_exponent: float = DEVICE_SPEED_EXPONENT) -> None:
        if device != "cpu":
            raise ValueError(f"the speed meter measures a CPU, got device {device!r}")
        self.device = device
        self._call = reference_gemm(device)
        self._host_call = reference_host(device)
        self._timing_host = nominal_s is None or nominal_host_s is not None
        self._timing_memory = nominal_s is None or nominal_memory_s is not None
        self._memory_call = reference_memory(device) if self._timing_memory else None
        for _ in range(3):
            self._call()
            self._host_call()
            if self._memory_call is not None:
                self._memory_call()
        self.seen_s: list[float] = []
        self.seen_host_s: list[float] = []
        self.seen_memory_s: list[float] = []
        self._last_at = -math.inf
        if nominal_s is None:
            probes = []
            for _ in range(_NOMINAL_PROBES):
                probes.append(self.reference())
                time.sleep(_NOMINAL_GAP_S)
            nominal_s = statistics.median(r.gemm_s for r in probes)
            nominal_host_s = statistics.median(r.host_s or 0.0 for r in probes)
            nominal_memory_s = statistics.median(r.memory_s or 0.0 for r in probes)
        for label, value in (("nominal reference time", nominal_s),
                             ("nominal host reference time", nominal_host_s),
                             ("nominal memory reference time", nominal_memory_s)):
            if value is not None and not value > 0:
                raise ValueError(f"{label} must be positive, got {value!r}")
        self.nominal_s = float(nominal_s)
        self.nominal_host_s = None if nominal_host_s is None else float(nominal_host_s)
        self.nominal_memory_s = None if nominal_memory_s is None else float(nominal_memory_s)
        self.normalise_memory = (self.nominal_memory_s is not None
                                 and (normalise_memory is None or normalise_memory))
        if not device_exponent > 0:
            raise ValueError(f"device exponent must be positive, got {device_exponent!r}")
        self.device_exponent = float(device_exponent)

    def reference(self) -> Reference:
        """The machine's speed now: one reference GEMM's seconds (median of
        ``_REFERENCE_CALLS`` calls), and the host and memory references' when this meter times
        them (the memory one the median of ``_MEMORY_REFERENCE_CALLS`` calls)."""
        gemm_s = median_of_calls(self._call)
        self.seen_s.append(gemm_s)
        host_s = memory_s = None
        if self._timing_host:
            host_s = median_of_calls(self._host_call)
            self.seen_host_s.append(host_s)
        if self._memory_call is not None:
            memory_s = median_of_calls(self._memory_call, _MEMORY_REFERENCE_CALLS)
            self.seen_memory_s.append(memory_s)
        self._last_at = time.perf_counter()
        return Reference(gemm_s, host_s, memory_s)

    def reference_s(self) -> float:
        """Seconds of one reference GEMM now (see :meth:`reference`)."""
        return self.reference().gemm_s

    def due(self) -> bool:
        """Whether ``REFERENCE_INTERVAL_S`` has passed since the last reference."""
        return time.perf_counter() - self._last_at >= REFERENCE_INTERVAL_S

    def factor(self, before: Reference, after: Reference, host_share: float = 0.0,
               gemm_share: float = 1.0) -> float:
        """What scales a measurement between two references to the nominal speed: ``nominal /
        reference`` (geometric mean of the two) of the GEMM, blended with the memory
        reference's by ``gemm_share`` (the device time's share that follows the GEMM, as
        :func:`gemm_share` gives it per op class; ignored unless this meter normalises memory
        and both references hold one) and raised to this meter's ``device_exponent``, then
        with the host reference's by ``host_share``, the part of the measured time that is host
        work (0-1; ignored when either reference or the nominal host time is missing)."""
        gemm = self.nominal_s / math.sqrt(before.gemm_s * after.gemm_s)
        w = min(max(gemm_share, 0.0), 1.0)
        if (w < 1.0 and self.normalise_memory and self.nominal_memory_s is not None
                and before.memory_s and after.memory_s):
            memory = self.nominal_memory_s / math.sqrt(before.memory_s * after.memory_s)
            gemm = w * gemm + (1.0 - w) * memory
        gemm = float(gemm ** self.device_exponent)
        share = min(max(host_share, 0.0), 1.0)
        if (share == 0.0 or self.nominal_host_s is None or before.host_s is None
                or after.host_s is None):
            return gemm
        host = self.nominal_host_s / math.sqrt(before.host_s * after.host_s)
        return blended(gemm, host, share)

    def typical(self) -> Reference:
        """The speed a finished calibration is re-expressed at: the median of the GEMM
        references taken, and the ``HOST_TYPICAL_QUANTILE`` quantile of the host references
        (None without them)."""
        gemm_s = statistics.median(self.seen_s) if self.seen_s else self.nominal_s
        host_s = (float(np.quantile(self.seen_host_s, HOST_TYPICAL_QUANTILE))
                  if self.seen_host_s else self.nominal_host_s)
        memory_s = (statistics.median(self.seen_memory_s) if self.seen_memory_s
                    else self.nominal_memory_s)
        return Reference(gemm_s, host_s, memory_s)

    def summary(self) -> dict[str, Any]:
        """What a profile's provenance records: the nominal times and the references seen."""
        seen = self.seen_s or [self.nominal_s]
        out = {"reference_s": self.nominal_s, "shape": list(REFERENCE_SHAPE),
               "normalised": True, "references": len(self.seen_s),
               "min_s": min(seen), "median_s": statistics.median(seen), "max_s": max(seen),
               "device_exponent": self.device_exponent}
        if self.nominal_host_s is not None:
            host = self.seen_host_s or [self.nominal_host_s]
            out.update(host_reference_s=self.nominal_host_s,
                       host_reference_calls=HOST_REFERENCE_CALLS,
                       host_min_s=min(host),
                       host_p10_s=float(np.quantile(host, HOST_TYPICAL_QUANTILE)),
                       host_median_s=statistics.median(host), host_max_s=max(host))
        if self.nominal_memory_s is not None:
            memory = self.seen_memory_s or [self.nominal_memory_s]
            out.update(memory_reference_s=self.nominal_memory_s,
                       memory_normalised=self.normalise_memory,
                       memory_reference_bytes=MEMORY_REFERENCE_BYTES,
                       memory_min_s=min(memory), memory_median_s=statistics.median(memory),
                       memory_max_s=max(memory))
        return out


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


def at_nominal_speed(timed: Callable[[], float], device: str = "cpu",
                     host_share: float = 0.0) -> float:
    """``timed()`` (seconds measured on ``device``), scaled to the nominal speed when a meter
    is in force (references taken right before and after it; ``host_share`` as in
    :meth:`SpeedMeter.factor`), else as measured."""
    meter = active_meter(device)
    if meter is None:
        return timed()
    before = meter.reference()
    t = timed()
    return t * meter.factor(before, meter.reference(), host_share)
