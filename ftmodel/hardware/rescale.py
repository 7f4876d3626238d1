"""Express a calibrated CPU profile at another machine speed: every time in it times a factor.

A CPU calibration scales its measurements to the speed the machine had in its first seconds
(:mod:`ftmodel.speed`: the nominal times of the reference GEMM and of the host reference). A
shared VM's speed in those seconds is one draw: on the 2-vCPU Xeon, two calibrations an hour
apart started at 0.85 and 0.74 ms, while the medians of the ~2,500 references each took over its
whole run were 0.81 and 0.79 ms. :func:`at_speed` re-expresses a finished profile at the
machine's typical speed instead (``ftmodel.speed.SpeedMeter.typical``: the GEMM references'
median, the host references' 10th percentile, the VM's fast host state, the memory
references' median), so that its predictions do not describe its speed in one moment.

Two factors, one per reference. Host times follow the host reference: the host costs per event
and per call of every framework, the in-model ``per_kernel_s`` (what a kernel costs inside a
network beyond its op's curve and its dispatch), the page-fault price, the host programs'
recorded times and the in-model networks' host parts. Device times follow the GEMM: curve
samples' times and their cold times, the in-model ``per_byte_s``, the cache probe's
``cold_s_per_byte``, the device's launch, sync and floor times, the sweep samples' recorded
times and the networks' device parts (a network's recorded total takes the two in
proportion). A profile whose op-curve samples were scaled by the memory reference as well
(``provenance.speed.memory_normalised``) re-expresses each op class's samples by its blend of
the two factors (:func:`ftmodel.speed.gemm_share`) when a memory reference time is given. A
profile without a host reference, or a call without a host time, scales both sides by the
GEMM's factor. Dimensionless terms
(``host_scale``, ``device_scale``, spreads, cache-model sizes and shares) are kept.
Predictions made with the result are the original ones' host and device parts times their
factors, but for two absolute thresholds of timer resolution
(``ftmodel.estimate.peaks.FLOOR_SAMPLE_MIN_S``, ``ftmodel.estimate.curves.INVERSION_MIN_S``): a
sample scaled across one changes which samples set the physics floor of tiny kernels or count
as an inversion.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from ftmodel.hardware.profile import FrameworkHost, HardwareProfile, OpClassData
from ftmodel.speed import (device_speed_exponent, gemm_share, memory_normalised,
                           nominal_host_reference_s, nominal_memory_reference_s,
                           nominal_reference_s)

__all__ = ["at_speed", "cache_at"]

_HOST_IN_MODEL = ("per_kernel_s",)
_DEVICE_IN_MODEL = ("per_byte_s",)


def _times(entry: Mapping[str, Any], factor: float) -> dict[str, Any]:
    """A raw record with each ``*_s`` number scaled (``spread`` and counts kept)."""
    return {k: v * factor if k.endswith("_s") and isinstance(v, (int, float))
            and not isinstance(v, bool) else v for k, v in entry.items()}


def _host_sample(entry: Mapping[str, Any], host: float, device: float) -> dict[str, Any]:
    """A host-stage record: a tiny-op program's times follow the host; an in-model network's
    host part the host, its device part the device, its total the two in proportion."""
    if "host_s" not in entry or "device_s" not in entry:
        return _times(entry, host)
    h, d = float(entry["host_s"]), float(entry["device_s"])
    total = h + d
    blended = (h * host + d * device) / total if total > 0 else device
    return {**_times(entry, blended), "host_s": h * host, "device_s": d * device}


def _curve(data: OpClassData, factor: float, name: str) -> OpClassData:
    if data.model != "samples":
        raise ValueError(f"op class {name!r} is a {data.model!r} model; only measured samples "
                         "can be re-expressed at another speed")
    return replace(data, samples=tuple((m, r, w, t * factor) for m, r, w, t in data.samples),
                   cold_s=tuple(t * factor for t in data.cold_s))


def _framework(fh: FrameworkHost, host: float, device: float) -> FrameworkHost:
    in_model = {k: v * host if k in _HOST_IN_MODEL else v * device if k in _DEVICE_IN_MODEL
                else v for k, v in fh.in_model.items()}
    return replace(fh, per_event_s={k: v * host for k, v in fh.per_event_s.items()},
                   per_call_s=fh.per_call_s * host,
                   samples=tuple(_host_sample(s, host, device) for s in fh.samples),
                   in_model=in_model,
                   guards=tuple((b, t * host, m * host) for b, t, m in fh.guards))


def cache_at(cache: Mapping[str, float], factor: float) -> dict[str, float]:
    """A device's cache-model parameters with its times (``cold_s_per_byte``, also per
    framework) times ``factor``; sizes and shares as they are."""
    return {k: v * factor if k.endswith("cold_s_per_byte") else v for k, v in cache.items()}


def at_speed(profile: HardwareProfile, reference_s: float,
             host_reference_s: float | None = None,
             memory_reference_s: float | None = None,
             device_exponent: float | None = None) -> HardwareProfile:
    """``profile`` (a CPU calibration scaled to ``provenance.speed``'s nominal times) expressed
    at the speed where the reference GEMM takes ``reference_s``, the host reference
    ``host_reference_s`` (None, or a profile without a host reference: host times follow the
    GEMM's factor) and the memory reference ``memory_reference_s`` (None, or a profile whose
    device times were not scaled by it: they follow the GEMM's factor alone); the former
    nominal times are kept as ``provenance.speed.start_*``.

    ``device_exponent``: device times move by their factor to this power; by default the one
    the profile's calibration scaled its device measurements with
    (:func:`ftmodel.speed.device_speed_exponent`: 0.5 for calibrations that record it, 1, in
    proportion, for older ones), which is what undoes that scaling. The recorded reference
    times are the ones given either way."""
    nominal_s = nominal_reference_s(profile.provenance)
    if nominal_s is None:
        raise ValueError(f"profile {profile.name!r} records no nominal speed "
                         "(provenance.speed); it cannot be re-expressed at another one")
    for label, value in (("reference time", reference_s),
                         ("host reference time", host_reference_s),
                         ("memory reference time", memory_reference_s)):
        if value is not None and not value > 0:
            raise ValueError(f"{label} must be positive, got {value!r}")
    if device_exponent is None:
        device_exponent = device_speed_exponent(profile.provenance)
    if not device_exponent > 0:
        raise ValueError(f"device exponent must be positive, got {device_exponent!r}")
    factor = reference_s / nominal_s
    nominal_host_s = nominal_host_reference_s(profile.provenance)
    host_factor = (host_reference_s / nominal_host_s
                   if host_reference_s is not None and nominal_host_s is not None else factor)
    nominal_memory_s = nominal_memory_reference_s(profile.provenance)
    memory_factor = (memory_reference_s / nominal_memory_s
                     if memory_reference_s is not None and nominal_memory_s is not None
                     and memory_normalised(profile.provenance) else None)

    def class_factor(op_class: str) -> float:
        if memory_factor is None:
            return float(factor ** device_exponent)
        w = gemm_share(op_class)
        return float((w * factor + (1.0 - w) * memory_factor) ** device_exponent)

    device_factor = float(factor ** device_exponent)
    dev = profile.device
    device = replace(dev, op_classes={k: _curve(v, class_factor(k), k)
                                      for k, v in dev.op_classes.items()},
                     launch_latency_s=dev.launch_latency_s * device_factor,
                     sync_s=dev.sync_s * device_factor,
                     kernel_floor_s=dev.kernel_floor_s * device_factor,
                     cache=cache_at(dev.cache, device_factor))
    host = profile.host and replace(
        profile.host, page_fault_s=profile.host.page_fault_s * host_factor,
        frameworks={k: _framework(v, host_factor, device_factor)
                    for k, v in profile.host.frameworks.items()})
    raw = profile.provenance.get("raw_op_times", {})
    speed = {"start_reference_s": nominal_s, **profile.provenance["speed"],
             "reference_s": reference_s}
    if nominal_host_s is not None:
        speed = {"start_host_reference_s": nominal_host_s, **speed,
                 "host_reference_s": nominal_host_s * host_factor}
    if memory_factor is not None and nominal_memory_s is not None:
        speed = {"start_memory_reference_s": nominal_memory_s, **speed,
                 "memory_reference_s": nominal_memory_s * memory_factor}
    provenance = {**profile.provenance, "speed": speed,
                  "raw_op_times": {c: [_times(e, class_factor(c)) for e in entries]
                                   for c, entries in raw.items()}}
    return replace(profile, device=device, host=host, provenance=provenance)
