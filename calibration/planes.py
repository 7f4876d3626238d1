"""Batch norm's cost per (image, channel) plane on a CPU, a calibration stage of its own.

PyTorch's CPU batch norm normalises each (image, channel) plane in a vectorised loop of its
own, so many small planes (the late layers of mobile CNNs: hundreds of channels on 4x4 and 7x7
maps) cost more than the op sweep's curve says for their bytes; that sweep's images have 16-64
channels of large maps (:mod:`ftmodel.calibration.ops`). Here batch norm is timed over 256 to
65,536 planes of 2x2, 4x4 and 7x7 pixels, and what each sample takes beyond the curve's price
is kept, the median at each plane count, as the curve's per-plane companion
(``norm@native_batch_norm:per_plane``, :data:`ftmodel.estimate.curves.PER_PLANE`), which
prices each kernel's ``Kernel.planes``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from ftmodel.calibration.op_sample import OpSample
from ftmodel.calibration.sweep_stage import class_stage
from ftmodel.estimate.curves import PER_PLANE, SampleCurve
from ftmodel.hardware.profile import OpClassData

__all__ = ["PLANES_CURVE", "PLANES_SWEEP", "per_plane_curve", "plane_count", "plane_samples",
           "plane_stage"]

PLANES_SWEEP = "norm:planes"  # the samples' curve key (raw timings are kept under it)
PLANES_CURVE = "norm@native_batch_norm"  # the curve whose per-plane companion they give


def plane_samples(quick: bool = False) -> list[OpSample]:
    """Batch norm (inference) on N·C planes of 2x2, 4x4 and 7x7 pixels, 256 to 65,536 planes
    (at most 4,096 channels; the rest is batch), and a floor at one 2x2 plane."""
    def bn(shape: tuple[int, int, int, int]) -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
        return nn.BatchNorm2d(shape[1]).eval().requires_grad_(False), (torch.randn(*shape),)

    family = "batch_norm planes"
    out = [OpSample(PLANES_SWEEP, family, f"{family} floor", *bn((1, 1, 2, 2)), is_floor=True)]
    for planes in ((256, 4096, 65536) if quick else (256, 1024, 4096, 16384, 65536)):
        for side in ((2,) if quick else (2, 4, 7)):
            c = min(planes, 4096)
            shape = (planes // c, c, side, side)
            out.append(OpSample(PLANES_SWEEP, family, f"{family} {shape}", *bn(shape)))
    return out


def plane_count(sample: OpSample) -> int:
    """The planes (N·C) of a :func:`plane_samples` sample's input."""
    x = sample.inputs[0]
    return int(x.shape[0]) * int(x.shape[1])


def per_plane_curve(curve: OpClassData, measured: OpClassData, planes: Sequence[int],
                    op_class: str = "norm") -> OpClassData | None:
    """The per-plane companion of ``curve`` (a curve of ``op_class``): each of ``measured``'s
    samples (a kernel looping over ``planes[i]`` small units: batch norm's planes,
    :func:`plane_samples`; ONNX Runtime's inner calls, :mod:`ftmodel.calibration.ort_loops`)
    against what ``curve`` prices its bytes at; one row per plane count, the median excess of
    its samples (units of different sizes), held as ``(0, planes, 0, seconds)``. An excess at
    or below zero is kept at 1 ns (few or large units cost nothing beyond the curve). None
    with fewer than 3 unit counts."""
    counts = np.asarray(planes, dtype=np.float64)
    if len(set(planes)) < 3 or len(counts) != len(measured.samples):
        return None
    fitted = SampleCurve.fit(op_class, curve)
    rows = np.asarray(measured.samples, dtype=np.float64)
    excess = rows[:, 3] - fitted(rows[:, 0], rows[:, 1], rows[:, 2])
    return OpClassData("samples", tuple(
        (0.0, float(p), 0.0, max(float(np.median(excess[counts == p])), 1e-9))
        for p in np.unique(counts)))


def plane_stage(samples: list[OpSample], classes: Mapping[str, OpClassData], device: str,
                rounds: int, round_s: float
                ) -> tuple[dict[str, OpClassData], list[dict[str, Any]]]:
    """Times ``samples`` (:func:`plane_samples`) and returns (the per-plane curve keyed by its
    name, if one came out; the samples' raw timings). ``classes``: the op sweep's curves, of
    which :data:`PLANES_CURVE` (or, missing, ``norm``) prices the samples' bytes."""
    measured, raw, _ = class_stage(samples, device, rounds, round_s)
    target = PLANES_CURVE if PLANES_CURVE in classes else "norm"
    curve = per_plane_curve(classes[target], measured,
                            [plane_count(s) for s in samples if not s.is_floor])
    return ({} if curve is None else {target + PER_PLANE: curve}), raw
