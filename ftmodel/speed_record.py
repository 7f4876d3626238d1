"""What a CPU profile records of the machine speed it was measured at (``provenance.speed``):
the nominal reference times its measurements were scaled to and how its device times follow
them. Read by :mod:`ftmodel.speed`'s users, :func:`ftmodel.hardware.rescale.at_speed` and
``speed="now"``; written by :meth:`ftmodel.speed.SpeedMeter.summary`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["device_speed_exponent", "memory_normalised", "nominal_host_reference_s",
           "nominal_memory_reference_s", "nominal_reference_s"]


def _speed(provenance: Mapping[str, Any]) -> Mapping[str, Any]:
    """A profile's ``provenance.speed`` record; empty when it has none."""
    speed = provenance.get("speed")
    return speed if isinstance(speed, Mapping) else {}


def nominal_reference_s(provenance: Mapping[str, Any]) -> float | None:
    """The reference time a profile's measurements were scaled to (``provenance.speed``), or
    None for a profile measured without a meter."""
    speed = _speed(provenance)
    if speed.get("normalised") and speed.get("reference_s"):
        return float(speed["reference_s"])
    return None


def nominal_host_reference_s(provenance: Mapping[str, Any]) -> float | None:
    """The host reference time a profile's host measurements were scaled to
    (``provenance.speed.host_reference_s``), or None for a profile measured without one."""
    speed = _speed(provenance)
    if speed.get("normalised") and speed.get("host_reference_s"):
        return float(speed["host_reference_s"])
    return None


def memory_normalised(provenance: Mapping[str, Any]) -> bool:
    """Whether a profile's device times were scaled by the memory reference as well as the
    GEMM's (``provenance.speed.memory_normalised``)."""
    speed = _speed(provenance)
    return bool(speed.get("normalised") and speed.get("memory_normalised")
                and speed.get("memory_reference_s"))


def nominal_memory_reference_s(provenance: Mapping[str, Any]) -> float | None:
    """The memory reference time a profile stands for: the one its device times were scaled to
    (``provenance.speed.memory_reference_s``) when they were (:func:`memory_normalised`), else
    the median of its readings over the calibration (``memory_median_s``, else the one timed at
    its start); None for a profile measured without one."""
    speed = _speed(provenance)
    if memory_normalised(provenance):
        return float(speed["memory_reference_s"])
    value = speed.get("memory_median_s") or speed.get("memory_reference_s")
    return float(value) if value else None


def device_speed_exponent(provenance: Mapping[str, Any]) -> float:
    """The power to which a profile's device times follow their references' factor
    (``provenance.speed.device_exponent``): 1 for a profile that does not record one (its
    calibration scaled device times in proportion)."""
    value = _speed(provenance).get("device_exponent")
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
        return float(value)
    return 1.0
