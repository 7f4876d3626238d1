"""``ftmodel calibrate --update``: re-measure some frameworks into an existing profile.

The eager host part and the device half (shared op curves, cache model) of a calibrated profile
are kept as they are; the named non-eager frameworks lose their host part and their own curves
(``<framework>/...``), which :func:`ftmodel.calibration.suite.calibrate` then measures again. The
profile's provenance keeps the original calibration's date and settings and gains an
``updates`` entry per update (frameworks, date, torch version, settings).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch

from ftmodel.errors import InvalidArgumentError
from ftmodel.hardware.profile import HardwareProfile, HostProfile, OpClassData, read_profile

__all__ = ["KeptState", "kept_for_update", "profile_to_update"]


def profile_to_update(path: Path, device: str, threads: int, cpu: str,
                      allocator: str = "default", identity: dict[str, str] | None = None
                      ) -> HardwareProfile:
    """The calibrated profile at ``path`` that an update adds to, checked to be this machine's
    (device type, thread count, host CPU ``cpu`` and, where the profile records one, the CPU's
    ``identity``, :func:`ftmodel.measure.cpu_identity`) and measured with the same
    ``allocator`` setting (:func:`ftmodel.measure.allocator_setting`; profiles that do not
    record one were measured with the default)."""
    if not path.exists():
        raise InvalidArgumentError(f"--update needs an existing profile at {str(path)!r}, and "
                                   "there is none; run the full calibration first (without "
                                   "--update)")
    base = read_profile(path)
    want_type = "cpu" if device == "cpu" else "cuda"
    problems = []
    if base.kind != "calibrated":
        problems.append(f"it is a {base.kind} profile, not a calibrated one")
    if base.device.type != want_type:
        problems.append(f"its device is {base.device.type!r}, not {want_type!r}")
    if int(base.host.threads) != threads:
        problems.append(f"it was measured with {base.host.threads} threads, not {threads} "
                        f"(pass --threads {base.host.threads})")
    had = base.provenance.get("allocator", "default")
    if had != allocator:
        problems.append(f"it was measured with allocator setting {had!r}, this run uses "
                        f"{allocator!r} (" + ("pass --default-malloc" if had == "default" else
                                              "leave out --default-malloc") + ")")
    if base.host.cpu != cpu:
        problems.append(f"its host CPU is {base.host.cpu!r}, this one is {cpu!r}")
    had_identity = base.provenance.get("cpu_identity")
    if had_identity and identity and had_identity != identity:
        problems.append(f"its CPU is {_identity_text(had_identity)}, this one is "
                        f"{_identity_text(identity)} (same name, another machine)")
    if problems:
        raise InvalidArgumentError(f"cannot update profile {str(path)!r}: " + "; ".join(problems)
                                   + "; calibrate afresh into a new file instead")
    return base


def _identity_text(identity: dict[str, str]) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(identity.items()))


@dataclass
class KeptState:
    """What a calibration run starts from when it updates ``base``."""

    classes: dict[str, OpClassData]
    raw: dict[str, Any]
    cache: dict[str, float]
    host: HostProfile
    provenance: dict[str, Any]
    duration_s: float  # the original calibration's (and earlier updates') duration


def kept_for_update(base: HardwareProfile, frameworks: list[str],
                    provenance: dict[str, Any]) -> KeptState:
    """``base`` without the named frameworks' host parts and own curves; ``provenance`` is the
    new run's (its date and settings go into the ``updates`` entry)."""
    own = tuple(f"{f}/" for f in frameworks)
    updates = list(base.provenance.get("updates", []))
    updates.append({"frameworks": list(frameworks), "date": provenance["date"],
                    "torch": torch.__version__, "settings": provenance["settings"]})
    listed = list(dict.fromkeys([*base.provenance.get("frameworks", []), *frameworks]))
    return KeptState(
        classes={c: d for c, d in base.device.op_classes.items() if not c.startswith(own)},
        raw={c: r for c, r in base.provenance.get("raw_op_times", {}).items()
             if not c.startswith(own)},
        cache={k: v for k, v in base.device.cache.items() if not k.startswith(own)},
        host=replace(base.host, frameworks={f: h for f, h in base.host.frameworks.items()
                                            if f not in frameworks}),
        provenance={**base.provenance, "updates": updates, "complete": False,
                    "frameworks": listed},
        duration_s=float(base.provenance.get("duration_s", 0.0)))
