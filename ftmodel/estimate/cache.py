"""Which operand bytes come from cache and which from memory, per kernel of a Program.

Op sweeps time each op on the same operands over and over, so they run from cache ("hot");
calibration also times them on rotating copies of their operands, larger together than the
last-level cache ("cold"). Inside a model the truth lies between, operand by operand: an
activation written by the previous op is still in cache, while the weights (read once per
forward pass) and skip connections (written many ops earlier) have been evicted when the model
touches more bytes than the cache holds. :func:`cold_fractions` gives, per kernel, the share of
the bytes it reads that is cold; :class:`~ftmodel.estimate.kernels.DeviceModel` turns that into
``t = t_hot + cold_fraction · (t_cold − t_hot)``.

Counting semantics
------------------
* The model is a least-recently-used cache of ``capacity_bytes``. An operand of ``s`` bytes
  read when ``d`` bytes have been touched since its storage was last touched keeps
  ``clip(capacity − d, 0, s)`` bytes in cache; the rest, ``clip(s + d − capacity, 0, s)``, is
  cold.
* ``d`` counts every operand byte read or written in between, repeats included (an upper bound
  of the distinct bytes LRU would count; repeats between two uses of one tensor are rare in a
  forward pass, and counting them keeps this O(operands)).
* Steady state: the forward pass is simulated twice and the second pass is reported, so weights
  and model inputs (first touched in the previous call) see the whole pass's traffic as ``d``.
* Kernels that carry no operand identities (``Kernel.reads`` empty, e.g. fused kernels of a
  compiled framework) fall back to: weights cold beyond the capacity at a distance of one whole
  pass, other inputs warm unless larger than the cache.
* Writes are not priced here: fresh outputs cost the same in hot and cold sweeps.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ftmodel.frameworks.base import Kernel

__all__ = ["cold_fractions", "cold_bytes"]


def cold_bytes(size: float, distance: float, capacity: float) -> float:
    """Bytes of an operand of ``size`` that an LRU cache of ``capacity`` no longer holds after
    ``distance`` bytes were touched since the operand was."""
    return float(min(max(size + distance - capacity, 0.0), size))


def cold_fractions(kernels: Sequence[Kernel], capacity_bytes: float) -> np.ndarray:
    """Per kernel, the share of the bytes it reads that come from memory (0 = all cached)."""
    n = len(kernels)
    out = np.zeros(n)
    if n == 0 or capacity_bytes <= 0:
        return out
    pass_bytes = float(sum(sum(b for _, b in k.reads) + sum(b for _, b in k.writes)
                           if k.reads else k.bytes_total for k in kernels))
    last_touch: dict[int, float] = {}
    clock = 0.0  # operand bytes touched so far
    for sweep in (0, 1):  # the first pass only sets up the steady state
        for i, k in enumerate(kernels):
            if not k.reads:
                if sweep:
                    out[i] = _fallback_fraction(k, pass_bytes, capacity_bytes)
                clock += k.bytes_total
                continue
            cold = 0.0
            for sid, size in k.reads:
                seen = last_touch.get(sid)
                distance = clock - seen if seen is not None else pass_bytes
                cold += cold_bytes(size, distance, capacity_bytes)
                clock += size
                last_touch[sid] = clock
            for sid, size in k.writes:
                clock += size
                last_touch[sid] = clock
            if sweep:
                read = sum(b for _, b in k.reads)
                out[i] = cold / read if read > 0 else 0.0
    return out


def _fallback_fraction(k: Kernel, pass_bytes: float, capacity: float) -> float:
    if k.bytes_read <= 0:
        return 0.0
    weights = float(min(k.bytes_weights, k.bytes_read))
    acts = float(k.bytes_read) - weights
    cold = cold_bytes(weights, pass_bytes, capacity) + cold_bytes(acts, 0.0, capacity)
    return cold / float(k.bytes_read)
