"""The machine's speed during a calibration: the reference GEMM of :mod:`ftmodel.speed` timed
on its own between the stages (the drift ``ftmodel calibrate`` reports), and the meter that
scales the stages' measurements to one speed."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ftmodel.hardware.profile import HardwareProfile
from ftmodel.measure import measure
from ftmodel.speed import (SpeedMeter, device_speed_exponent, memory_normalised,
                           nominal_host_reference_s, nominal_memory_reference_s,
                           nominal_reference_s, reference_gemm, speed_normalised)

__all__ = ["DRIFT_WARNING", "reference_drift", "reference_probe_s", "speed_meter_for"]

# Timed on its own before and after each stage. A shared VM's speed moves by 10-100% over
# minutes; a stage whose curves and the in-model networks timed after them saw different speeds
# fits that change into its scales unless its measurements are scaled (speed_meter_for).
DRIFT_WARNING = 0.10  # above this, `ftmodel calibrate` suggests measuring again


def reference_probe_s(device: str, rounds: int) -> float:
    """Seconds of the reference GEMM on ``device`` now (fastest round's median), unscaled."""
    with speed_normalised(None):  # the probe reports the raw speed
        return measure(reference_gemm(device), device=device, rounds=max(3, rounds), warmup=3,
                       round_s=0.05).time_s


def reference_drift(probes: Sequence[Mapping[str, Any]]) -> float:
    """How far the reference GEMM moved over a calibration: slowest / fastest − 1 (0 with fewer
    than two probes)."""
    times = [float(p["s"]) for p in probes]
    return max(times) / min(times) - 1.0 if len(times) > 1 and min(times) > 0 else 0.0


def speed_meter_for(device: str, base: HardwareProfile | None) -> SpeedMeter | None:
    """The meter a CPU calibration scales its measurements with: a new nominal speed for a
    fresh profile, the profile's own for an update (none for a profile measured without one:
    its earlier stages were not scaled, and the new ones must match them; the GEMM alone for a
    profile measured before the host reference; device times on the GEMM alone for one
    measured before the memory reference scaled them)."""
    if device != "cpu":
        return None
    if base is None:
        return SpeedMeter(device)
    nominal_s = nominal_reference_s(base.provenance)
    if nominal_s is None:
        return None
    return SpeedMeter(device, nominal_s=nominal_s,
                      nominal_host_s=nominal_host_reference_s(base.provenance),
                      nominal_memory_s=nominal_memory_reference_s(base.provenance),
                      normalise_memory=memory_normalised(base.provenance),
                      device_exponent=device_speed_exponent(base.provenance))
