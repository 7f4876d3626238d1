"""The fastest rates a calibrated profile's samples reached: the physics floor of sampled
profiles (:class:`ftmodel.estimate.kernels.DeviceModel` prices no kernel below its MACs at the
MAC rate, nor its bytes at the byte rate, found here)."""

from __future__ import annotations

import numpy as np

from ftmodel.estimate.curves import PER_CALL, PER_PLANE, WINDOWS
from ftmodel.hardware.profile import DeviceProfile
from ftmodel.tracing.formulas import MAC_CLASSES

__all__ = ["FLOOR_SAMPLE_MIN_S", "OFF_WORK_AXIS", "measured_peaks"]

# samples shorter than this are not trusted to set the measured peak rates (timer resolution,
# floor subtraction): the physics floor comes from well-resolved samples only
FLOOR_SAMPLE_MIN_S = 10e-6
# companion curves whose axes are not the work the call did: a fused layer's per-call cost
# against a step's work, batch norm's per-plane cost against its planes, a pool's time against
# the bytes its windows read (which count an input element once per window it lies in)
OFF_WORK_AXIS = (PER_CALL, PER_PLANE, WINDOWS)


def measured_peaks(device: DeviceProfile) -> tuple[float, float]:
    """(MACs per second, bytes per second): the fastest rates any calibrated sample resolved
    (time at least :data:`FLOOR_SAMPLE_MIN_S`) reached — MACs over matrix-like classes, bytes
    read and written over the others, every framework's curves included but those of
    :data:`OFF_WORK_AXIS`; 0 where none."""
    peak_macs = peak_bytes = 0.0
    for name, data in device.op_classes.items():
        if data.model != "samples" or not data.samples or name.endswith(OFF_WORK_AXIS):
            continue
        rows = np.asarray(data.samples, dtype=np.float64)  # (n, 4): macs, read, written, s
        ok = rows[:, 3] >= FLOOR_SAMPLE_MIN_S
        if not ok.any():
            continue
        base = name.split("/")[-1].split(":")[0].split("@")[0]
        if base in MAC_CLASSES:
            peak_macs = max(peak_macs, float((rows[ok, 0] / rows[ok, 3]).max()))
        else:
            peak_bytes = max(peak_bytes, float(((rows[ok, 1] + rows[ok, 2]) / rows[ok, 3]).max()))
    return peak_macs, peak_bytes
