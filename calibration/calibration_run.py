"""What one calibration run has measured so far, and how it writes it.

:func:`ftmodel.calibration.suite.calibrate` builds one :class:`CalibrationRun`; its stages
(:mod:`ftmodel.calibration.eager_stage`, :mod:`ftmodel.calibration.framework_stage`) add op
curves, host parts and probes to it, and after each stage the run writes the profile so far
atomically to its path, so an interrupted calibration keeps what it measured
(``provenance.complete`` false, the op classes not yet measured listed).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ftmodel.calibration.in_model_cpu import InModelNetworks
from ftmodel.calibration.ops import OP_SWEEP_CLASSES
from ftmodel.calibration.progress import CalibrationProgress
from ftmodel.calibration.speed_probe import reference_drift, reference_probe_s
from ftmodel.hardware.profile import (DeviceProfile, FrameworkHost, HardwareProfile, HostProfile,
                                      OpClassData, write_profile)
from ftmodel.speed import SpeedMeter

__all__ = ["CalibrationRun"]


@dataclass
class CalibrationRun:
    """The state of one calibration: its settings, what it has measured, where it writes."""

    device: str  # "cpu" or "cuda[:N]"
    path: Path  # where the profile is written after every stage
    name: str  # the profile's name
    dev_name: str  # the measured device's name (CPU model or GPU name)
    quick: bool
    rounds: int  # timing rounds per measurement
    round_s: float  # seconds per round
    passes: int  # passes over the op sweeps
    cold: bool  # whether samples are also timed after a cache flush
    llc_bytes: int  # the last-level cache's size
    flush: Callable[[], object] | None  # evicts the caches (None: no cold timings)
    bar: CalibrationProgress
    meter: SpeedMeter | None  # expresses every CPU measurement at one machine speed
    provenance: dict[str, Any]
    host: HostProfile
    started: float = field(default_factory=time.time)  # wall-clock start, seconds
    classes: dict[str, OpClassData] = field(default_factory=dict)
    raw: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    cache: dict[str, float] = field(default_factory=dict)
    # each CPU framework's synthetic networks, kept to fit its in-model terms again against
    # the curves the profile is written with (ftmodel.calibration.in_model_cpu.refit_profile)
    measured_nets: dict[str, InModelNetworks] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.probes: list[dict[str, Any]] = list(self.provenance.get("reference_probe", []))
        self.provenance["reference_probe"] = self.probes

    def snapshot(self, complete: bool) -> HardwareProfile:
        """The profile as measured so far."""
        self.provenance.update(
            complete=complete, duration_s=round(time.time() - self.started, 1),
            missing_op_classes=[c for c in OP_SWEEP_CLASSES if c not in self.classes],
            raw_op_times=self.raw)
        dev = DeviceProfile(name=self.dev_name, type="cpu" if self.device == "cpu" else "cuda",
                            execution="sync" if self.device == "cpu" else "async",
                            op_classes=dict(self.classes), dtypes=("fp32",),
                            cache=dict(self.cache))
        if self.meter is not None:  # an update keeps the nominal time and where it came from
            self.provenance["speed"] = {**self.provenance.get("speed", {}),
                                        **self.meter.summary()}
        return HardwareProfile(name=self.name, kind="calibrated", device=dev, host=self.host,
                               provenance=dict(self.provenance))

    def write(self) -> None:
        """Write the profile so far (incomplete) to the run's path, atomically."""
        write_profile(self.snapshot(False), self.path)

    def probe(self, stage: str) -> None:
        """Time the reference on its own at a stage boundary (``provenance.reference_probe``)
        and update how far the machine's speed has moved (``provenance.reference_drift``)."""
        self.probes.append({"stage": stage, "s": reference_probe_s(self.device, self.rounds),
                            "at_s": round(time.time() - self.started, 1)})
        self.provenance["reference_drift"] = round(reference_drift(self.probes), 4)

    def set_framework(self, framework: str, fh: FrameworkHost) -> None:
        """Put ``framework``'s host part into the host profile."""
        self.host = replace(self.host, frameworks={**self.host.frameworks, framework: fh})
