"""What dynamo's guards cost on each call of a compiled model.

Before inductor's wrapper runs, dynamo checks its guards on every call: each tensor the graph
reads (the parameters and buffers ``inline_inbuilt_nn_modules`` makes graph inputs, and the
model's inputs: dtype, shape, strides, dispatch keys) and each module the forward passes through
(its type, its dicts of hooks and submodules). A lowering counts them as the host events
:data:`ftmodel.program.GUARD_TENSOR` and
:data:`~ftmodel.program.GUARD_MODULE`, once a call.

Their price depends on what the call did between two guard evaluations: the guards walk Python
objects spread over the heap, and a model that streams its weights and activations through the
caches leaves them cold (compiled chains of tiny modules on a 2-vCPU AMD EPYC Zen 4 guest: 0.33 µs
a tensor and 0.2 µs a module back to back, about 1.3 µs each after 64 MB were written; GhostNet's
512 tensors and 412 modules cost 1.2 ms a call). Calibration measures both prices after writing
several amounts of memory between calls (``FrameworkHost.guards``: rows of bytes written, seconds
per tensor, seconds per module); a prediction reads them at the bytes the program's kernels touch
in one call (each storage once), interpolated in log bytes, and adds the guards' seconds to the
call's fixed cost. A profile without those rows prices no guard (its per-call cost, fitted on
small programs, holds theirs).

Not counted: guards on Python scalars, globals and closures, and a Hugging Face module's
configuration attributes (DistilBERT's guards measured 0.39 ms a call where its 69 tensors and
64 modules price 0.17). A real model's tensor or module costs more than a chain's after the same
bytes: on a 2-vCPU Intel Xeon VM the chains' prices gave 0.37-0.74x the guard time of
torchvision and timm CNNs at batch 1, 0.2x that of Hugging Face encoders
(``benchmarks/inductor_guards.py --models``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from ftmodel.program import GUARD_MODULE, GUARD_TENSOR, Kernel

__all__ = ["GuardRow", "bytes_touched", "guard_prices_s", "guard_seconds"]

# (bytes written between two calls, seconds per guarded tensor, seconds per guarded module)
GuardRow = tuple[float, float, float]


def bytes_touched(kernels: Sequence[Kernel]) -> float:
    """Bytes the kernels of one call read or write, each storage counted once (a kernel without
    storage ids counts its own bytes)."""
    seen: dict[int, int] = {}
    loose = 0
    for k in kernels:
        if not k.reads and not k.writes:
            loose += k.bytes_total
            continue
        for sid, n in (*k.reads, *k.writes):
            if n > seen.get(sid, 0):
                seen[sid] = n
    return float(loose + sum(seen.values()))


def guard_prices_s(rows: Sequence[GuardRow], touched_bytes: float) -> tuple[float, float]:
    """(seconds per tensor, seconds per module) at ``touched_bytes`` written between calls:
    interpolated between the calibration's rows in log bytes (linearly in bytes from the row at
    0), the first row's below it, the last row's beyond it."""
    pts = sorted(rows)
    if not pts:
        return 0.0, 0.0
    if touched_bytes <= pts[0][0]:
        return pts[0][1], pts[0][2]
    for (b0, t0, m0), (b1, t1, m1) in zip(pts, pts[1:]):
        if touched_bytes <= b1:
            if b0 <= 0.0:
                w = touched_bytes / b1
            else:
                w = math.log(touched_bytes / b0) / math.log(b1 / b0)
            return t0 + w * (t1 - t0), m0 + w * (m1 - m0)
    return pts[-1][1], pts[-1][2]


def guard_seconds(events: Mapping[str, int], kernels: Sequence[Kernel],
                  rows: Sequence[GuardRow]) -> float:
    """Seconds of guard evaluation in one call of a program with host ``events`` and
    ``kernels``, at the prices ``rows`` (``FrameworkHost.guards``); 0 without rows or events."""
    tensors, modules = events.get(GUARD_TENSOR, 0), events.get(GUARD_MODULE, 0)
    if not rows or not (tensors or modules):
        return 0.0
    per_tensor, per_module = guard_prices_s(rows, bytes_touched(kernels))
    return tensors * per_tensor + modules * per_module
