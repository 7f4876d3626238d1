"""The roofline of a spec-derived op class (``model: roofline``): a saturating efficiency on
peak MAC rate and bandwidth, wave quantisation on a GPU, a per-kernel floor. What the
parameters mean is described in :mod:`ftmodel.estimate.kernels`."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["ELEM_BYTES", "Roofline", "wave_factor"]

_EPS = 1.0  # keeps the half-work terms finite at zero work, as in the sample curves

ELEM_BYTES = {"fp16": 2.0, "bf16": 2.0, "fp32": 4.0, "tf32": 4.0, "fp64": 8.0}


def wave_factor(macs: np.ndarray, bytes_written: np.ndarray, elem_bytes: float, slots: float,
                tile_outputs: float) -> np.ndarray:
    """Time over ideal time (≥ 1) of MAC kernels that cannot fill the GPU: the output
    (``bytes_written / elem_bytes`` elements) is cut into tiles of ``tile_outputs`` elements, one
    per SM at a time (``slots`` SMs); with ``u = tiles / slots`` the kernel takes
    ``(1 + u³)^(1/3)`` waves — one while SMs idle, ``u`` when there are many (a smooth
    ``max(1, u)``) — so the factor is ``waves / u``."""
    u = np.maximum(bytes_written / elem_bytes, 1.0) / (tile_outputs * slots)
    return np.where(macs > 0, (1.0 + u ** 3) ** (1.0 / 3.0) / u, 1.0)


@dataclass
class Roofline:
    """A spec-derived op class (see :mod:`ftmodel.estimate.kernels`): seconds of kernels doing
    ``macs`` and moving ``br`` + ``bw`` bytes, from the profile's peak, bandwidth, half-work
    and floor parameters (``<name>:<dtype>`` overrides ``<name>``)."""

    params: dict[str, float]

    def _p(self, name: str, dtype: str, default: float = 0.0) -> float:
        return self.params.get(f"{name}:{dtype}", self.params.get(name, default))

    def __call__(self, macs: np.ndarray, br: np.ndarray, bw: np.ndarray,
                 dtype: str = "fp32") -> np.ndarray:
        nbytes = br + bw
        t_mem = nbytes / self._p("bandwidth_Bps", dtype) * (
            1.0 + self._p("half_bytes", dtype) / (nbytes + _EPS))
        t: np.ndarray = np.asarray(t_mem, dtype=np.float64)
        peak = self._p("peak_macs_per_s", dtype)
        if peak > 0:
            q: float | np.ndarray = 1.0
            slots, tile = self._p("wave_slots", dtype), self._p("tile_outputs", dtype)
            if slots > 0 and tile > 0:
                q = wave_factor(macs, bw, ELEM_BYTES.get(dtype, 4.0), slots, tile)
            t_mac = (macs * q + self._p("half_macs", dtype) * macs / (macs + _EPS)) / peak
            t = np.maximum(t_mac, t_mem)
        floored: np.ndarray = np.maximum(t, self._p("floor_s", dtype))
        return floored
