"""A kernel's transposed bytes priced on the framework's transpose curve.

A generated kernel may copy some of its operands into another memory order besides what it
computes (``Kernel.bytes_transposed``): without freezing, inductor copies each convolution's
weights into channels-last on every call, fused into the norm or activation kernel before the
convolution. Such a copy reads with a stride and runs 2-4x slower than a contiguous loop over
the same bytes (AMD EPYC Zen 4: five 192x192x3x3 weights, 1.3 MB each, 21 µs each through a
contiguous loop, 70-95 µs through the channels-last copy). Where the profile has the
framework's transpose curve (``<framework>/copy:transpose``, timed on such copies alone:
``benchmarks/inductor_transposes.py``), those bytes are priced on it and the rest of the kernel
on its class's curve; a kernel that only transposes (the ``transpose`` variant) is looked up on
that curve whole.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace

import numpy as np

from ftmodel.program import Kernel
from ftmodel.tracing.variants import TRANSPOSE

__all__ = ["TransposedBytes", "transpose_curve_name"]


def transpose_curve_name(framework: str) -> str:
    """The key of ``framework``'s transpose curve in a device profile."""
    return f"{framework}/copy:{TRANSPOSE}"


class TransposedBytes:
    """Splits kernels into the part their class's curve prices and their transposed bytes'
    time on the framework's transpose curve."""

    def __init__(self, curve: Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]
                 ) -> None:
        self.curve = curve  # a SampleCurve: seconds of (macs, bytes read, bytes written)

    @classmethod
    def of(cls, curves: Mapping[str, object], framework: str) -> TransposedBytes | None:
        """The framework's transpose pricing, None where the profile has no such curve."""
        curve = curves.get(transpose_curve_name(framework)) if framework else None
        return cls(curve) if callable(curve) else None

    def split(self, kernels: Sequence[Kernel]
              ) -> tuple[list[Kernel], np.ndarray, np.ndarray]:
        """(the kernels less their transposed bytes, indices of those that had some, seconds
        of those bytes on the transpose curve, read and written once each). A ``transpose``
        kernel is left whole: its own curve is the transpose curve."""
        idx = [i for i, k in enumerate(kernels)
               if k.bytes_transposed > 0 and k.variant != TRANSPOSE]
        if not idx:
            return list(kernels), np.zeros(0, dtype=np.int64), np.zeros(0)
        rest = list(kernels)
        moved = np.zeros(len(idx))
        for j, i in enumerate(idx):
            k = kernels[i]
            t = min(k.bytes_transposed, k.bytes_read, k.bytes_written)
            moved[j] = t
            rest[i] = replace(k, bytes_read=k.bytes_read - t, bytes_written=k.bytes_written - t,
                              bytes_transposed=0)
        seconds = np.asarray(self.curve(np.zeros(len(idx)), moved, moved), dtype=np.float64)
        return rest, np.asarray(idx, dtype=np.int64), seconds
