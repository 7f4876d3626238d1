"""Express a calibrated CPU profile at another machine speed: every time in it times one factor.

A CPU calibration scales its measurements to the speed the machine had in its first seconds
(:mod:`ftmodel.speed`: the reference GEMM's *nominal* time). A shared VM's speed in those
seconds is one draw: on the 2-vCPU Xeon, two calibrations an hour apart started at 0.85 and
0.74 ms, while the medians of the ~2,500 references each took over its whole run were 0.81
and 0.79 ms. :func:`at_speed` re-expresses a finished profile at the median instead, so that
its predictions describe the machine's typical speed rather than its speed in one moment.

Every quantity in seconds is multiplied by the factor: curve samples' times and their cold
times, host costs per event and per call, the in-model ``per_kernel_s`` and ``per_byte_s``, the
page-fault price, the device's launch, sync and floor times, the raw host programs' and sweep
samples' recorded times (every ``*_s`` number), and ``provenance.speed.reference_s``.
Dimensionless terms (``host_scale``, ``device_scale``, spreads, cache-model sizes and shares)
are kept. Predictions made with the result are the original ones times the factor, but for
two absolute thresholds of timer resolution (``ftmodel.estimate.kernels.FLOOR_SAMPLE_MIN_S``,
``ftmodel.estimate.curves.INVERSION_MIN_S``): a sample scaled across one changes which samples
set the physics floor of tiny kernels or count as an inversion.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from ftmodel.hardware.profile import FrameworkHost, HardwareProfile, OpClassData
from ftmodel.speed import nominal_reference_s

__all__ = ["at_speed"]

_SECONDS_IN_MODEL = ("per_kernel_s", "per_byte_s")


def _times(entry: Mapping[str, Any], factor: float) -> dict[str, Any]:
    """A raw record with each ``*_s`` number scaled (``spread`` and counts kept)."""
    return {k: v * factor if k.endswith("_s") and isinstance(v, (int, float))
            and not isinstance(v, bool) else v for k, v in entry.items()}


def _curve(data: OpClassData, factor: float, name: str) -> OpClassData:
    if data.model != "samples":
        raise ValueError(f"op class {name!r} is a {data.model!r} model; only measured samples "
                         "can be re-expressed at another speed")
    return replace(data, samples=tuple((m, r, w, t * factor) for m, r, w, t in data.samples),
                   cold_s=tuple(t * factor for t in data.cold_s))


def _framework(fh: FrameworkHost, factor: float) -> FrameworkHost:
    return replace(fh, per_event_s={k: v * factor for k, v in fh.per_event_s.items()},
                   per_call_s=fh.per_call_s * factor,
                   samples=tuple(_times(s, factor) for s in fh.samples),
                   in_model={k: v * factor if k in _SECONDS_IN_MODEL else v
                             for k, v in fh.in_model.items()})


def at_speed(profile: HardwareProfile, reference_s: float) -> HardwareProfile:
    """``profile`` (a CPU calibration scaled to ``provenance.speed.reference_s``) expressed at
    the speed where the reference GEMM takes ``reference_s``; the former nominal time is kept
    as ``provenance.speed.start_reference_s``."""
    nominal_s = nominal_reference_s(profile.provenance)
    if nominal_s is None:
        raise ValueError(f"profile {profile.name!r} records no nominal speed "
                         "(provenance.speed); it cannot be re-expressed at another one")
    if not reference_s > 0:
        raise ValueError(f"reference time must be positive, got {reference_s!r}")
    factor = reference_s / nominal_s
    dev = profile.device
    device = replace(dev, op_classes={k: _curve(v, factor, k) for k, v in dev.op_classes.items()},
                     launch_latency_s=dev.launch_latency_s * factor, sync_s=dev.sync_s * factor,
                     kernel_floor_s=dev.kernel_floor_s * factor)
    host = profile.host and replace(
        profile.host, page_fault_s=profile.host.page_fault_s * factor,
        frameworks={k: _framework(v, factor) for k, v in profile.host.frameworks.items()})
    raw = profile.provenance.get("raw_op_times", {})
    speed = {"start_reference_s": nominal_s, **profile.provenance["speed"],
             "reference_s": reference_s}
    provenance = {**profile.provenance, "speed": speed,
                  "raw_op_times": {c: [_times(e, factor) for e in entries]
                                   for c, entries in raw.items()}}
    return replace(profile, device=device, host=host, provenance=provenance)
