"""Price a CPU profile at the speed this machine has now, not the one its calibration recorded.

A calibrated CPU profile stands for the machine's speed over its calibration
(:meth:`ftmodel.speed.SpeedMeter.typical`: the reference GEMM's median, the host reference's
10th percentile, the memory reference's median). A shared virtual machine keeps a speed for
minutes to hours and then changes it: on the 2-vCPU AMD EPYC (Zen 3) guest the reference GEMM's
median was 1.38 and 1.64 ms over two calibrations and 3.22-3.25 ms over two others, the same
day, and a corpus run's passes 15 minutes apart started at 2.41, 1.32 and 1.37 ms
(``benchmarks/results/cpu-epyc-milan/``). A profile from the slow phase prices every model
about 1.5x what the fast phase measures, whatever its model gets right.

``speed="now"`` (:class:`ftmodel.api.Predictor`, ``predict_latency``, ``ftmodel predict
--speed now``) takes :func:`probe_speed` (``PROBE_REFERENCES`` readings of the three references,
``PROBE_GAP_S`` apart: about one second) and re-expresses the profile at it
(:func:`ftmodel.hardware.rescale.at_speed`, the same factors a calibration applies to its own
samples): host times by the host reference, each op class's device times by its blend of the
GEMM and memory references. The prediction then describes this machine as it is when the
prediction is made; it is not deterministic across calls (each probe is one reading of a noisy
machine) and costs the probe once per predictor. Only CPU profiles calibrated with a speed
meter (``provenance.speed``) can be re-expressed; a GPU's speed does not follow the host VM's.
What the probe does not see: a change of speed after it, and kernels that follow the references
less than in proportion (``benchmarks/speed_kernels.py``).
"""

from __future__ import annotations

import time
from dataclasses import replace

from ftmodel.hardware.rescale import at_speed
from ftmodel.errors import InvalidArgumentError
from ftmodel.hardware.profile import HardwareProfile
from ftmodel.speed import Reference, SpeedMeter, nominal_reference_s

__all__ = ["PROBE_GAP_S", "PROBE_REFERENCES", "SPEEDS", "at_current_speed", "check_speed",
           "probe_speed", "speed_record"]

SPEEDS = ("profile", "now")  # what a prediction's speed= accepts
PROBE_REFERENCES = 10  # readings of the references in one probe ...
PROBE_GAP_S = 0.05  # ... this far apart (about one second in all on a 2-vCPU guest)


def probe_speed(device: str = "cpu", references: int = PROBE_REFERENCES) -> Reference:
    """This machine's speed now: ``references`` readings of the reference GEMM, host and
    memory references, summarised as a calibration summarises its own
    (:meth:`ftmodel.speed.SpeedMeter.typical`)."""
    if references < 1:
        raise InvalidArgumentError(f"references must be at least 1, got {references!r}")
    # the nominal times are irrelevant here: the meter only reads the references
    meter = SpeedMeter(device, nominal_s=1.0, nominal_host_s=1.0, nominal_memory_s=1.0)
    for i in range(references):
        if i:
            time.sleep(PROBE_GAP_S)
        meter.reference()
    return meter.typical()


def check_speed(speed: str, profile: HardwareProfile) -> None:
    """Raise a named error unless ``speed`` is one of ``SPEEDS`` and ``profile`` can be priced
    at it."""
    if speed not in SPEEDS:
        raise InvalidArgumentError(
            f"speed must be one of {', '.join(map(repr, SPEEDS))}, got {speed!r}: 'profile' "
            "prices at the speed the profile's calibration recorded, 'now' probes this "
            "machine's speed first (about one second) and prices at it")
    if speed == "now" and (profile.device.type != "cpu"
                           or nominal_reference_s(profile.provenance) is None):
        raise InvalidArgumentError(
            f"speed='now' re-expresses a CPU profile calibrated on this machine, but profile "
            f"{profile.name!r} is a {profile.device.type} profile"
            + ("" if profile.device.type != "cpu" else " with no recorded speed "
               "(provenance.speed)")
            + "; use speed='profile', or recalibrate with `ftmodel calibrate --device cpu`")


def at_current_speed(profile: HardwareProfile, reference: Reference | None = None
                     ) -> HardwareProfile:
    """``profile`` re-expressed at ``reference`` (default: :func:`probe_speed` now)."""
    check_speed("now", profile)
    ref = reference if reference is not None else probe_speed(profile.device.type)
    out: HardwareProfile = at_speed(profile, ref.gemm_s, ref.host_s, ref.memory_s)
    return replace(out, provenance={**out.provenance,
                                    "speed": {**out.provenance["speed"], "probed": True}})


def speed_record(profile: HardwareProfile) -> dict[str, float | str]:
    """What a Prediction records of the speed it was priced at (``Prediction.extra['speed']``):
    the reference times of ``profile.provenance.speed`` (a probed profile's are the probe's)."""
    speed = profile.provenance.get("speed")
    if not isinstance(speed, dict) or not speed.get("normalised"):
        return {"basis": "profile"}
    out: dict[str, float | str] = {"basis": "now" if speed.get("probed") else "profile"}
    for key in ("reference_s", "host_reference_s", "memory_reference_s"):
        if isinstance(speed.get(key), (int, float)):
            out[key] = float(speed[key])
    return out
