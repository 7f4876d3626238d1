"""How many spans ONNX Runtime's CPU kernels split a broadcasting binary op into.

ONNX Runtime's element-wise binary kernels (``Add``, ``Sub``, ``Mul``, ``Div``, ...) walk their
output in *spans*: runs of elements over which both inputs either advance together or one of
them stays on a single value (``Broadcaster`` and ``BroadcastLoop`` in
``onnxruntime/core/providers/cpu/math/element_wise_ops.h``). Each span is one call of the op's
vectorised loop, with the iterators advanced between calls. The span is as long as the
innermost run of axes on which neither input switches between broadcasting and not; an input
whose innermost axis has size 1 makes every span one element long, whatever the other input
(``x[..., -1:] + eps`` on a ``(16, 16, 64, 1)`` tensor: 16,384 spans).

Timed alone on the Zen 4 EPYC (2 threads, single-node sessions, the profiler's node time), each
span cost 9-10 ns beyond the same op on equal-shaped inputs when one element long (an ``Add`` of
a scalar to 16,384 elements: 169 µs against 6 µs for the same elements in one span), 3-17 ns
when 4-64 elements long, and 4-8 ns when 49-784 elements long (an SE block's channel scale,
``(16, 960, 7, 7)`` by ``(16, 960, 1, 1)``: 130 µs against 42 for the same elements in one span).
:func:`broadcast_spans` counts them (``Kernel.planes``), priced by the element-wise curve's
per-span companion where the profile has one (``elementwise:per_plane``,
:mod:`ftmodel.calibration.ort_loops`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from math import prod

__all__ = ["BROADCAST_OPS", "broadcast_spans"]

# ONNX Runtime CPU binary ops that walk their output through ``Broadcaster`` spans
BROADCAST_OPS = frozenset({"Add", "Sub", "Mul", "Div", "Pow", "PRelu", "Mod", "Equal", "Less",
                           "Greater", "LessOrEqual", "GreaterOrEqual", "And", "Or", "Xor"})


@dataclass
class _Iterator:
    """One input's walk (``BroadcastIterator``): per run of axes whether it advances (delta >
    0) or stays (delta <= 0), and the run's element count."""

    deltas: list[int] = field(default_factory=list)
    counts: list[int] = field(default_factory=list)
    count: int = 1

    def init(self, axis: int, largest: int) -> None:
        self.deltas.append(1 if axis > 1 else 0)
        self.counts.append(largest)
        self.count *= axis

    def append(self, axis: int, largest: int) -> None:
        if axis > 1 and self.deltas[-1] <= 0:  # stops broadcasting: a new run
            self.deltas.append(self.count)
            self.counts.append(1)
        elif axis <= 1 and self.deltas[-1] > 0:  # starts broadcasting: a new run
            self.deltas.append(-self.count)
            self.counts.append(1)
        self.counts[-1] *= largest
        self.count *= axis


def _span(a: list[int], b: list[int]) -> int:
    """The span length ``Broadcaster(a, b)`` chooses (``GetSpanSize``), walking the axes from
    the innermost, as ONNX Runtime does."""
    it_a, it_b = _Iterator(), _Iterator()
    low, high = min(len(a), len(b)), max(len(a), len(b))
    index = 0
    if low == 0:  # a scalar input broadcasts from the first axis on
        if not a and not b:
            it_a.init(1, 1)
            it_b.init(1, 1)
        elif not a:
            axis = b.pop()
            it_a.init(1, axis)
            it_b.init(axis, axis)
        else:
            axis = a.pop()
            it_a.init(axis, axis)
            it_b.init(1, axis)
        index = 1
    while index < low:  # the first axis longer than 1 (or the last shared one) starts the runs
        x, y = a.pop(), b.pop()
        index += 1
        if max(x, y) == 1 and index < low:
            continue
        it_a.init(x, max(x, y))
        it_b.init(y, max(x, y))
        break
    while index < low:
        x, y = a.pop(), b.pop()
        index += 1
        if max(x, y) > 1:
            it_a.append(x, max(x, y))
            it_b.append(y, max(x, y))
    while index < high:  # the longer shape's outer axes: the shorter input broadcasts on them
        if b:
            axis = b.pop()
            it_a.append(1, axis)
            it_b.append(axis, axis)
        else:
            axis = a.pop()
            it_a.append(axis, axis)
            it_b.append(1, axis)
        index += 1
    return max(1, min(it_a.counts[0], it_b.counts[0]))


def broadcast_spans(a: Sequence[int], b: Sequence[int]) -> int:
    """The spans a binary op of ``a``- and ``b``-shaped inputs runs in (see the module
    docstring): the output's elements over the span length; 1 when both inputs have the same
    shape (one span over the whole output), 0 for an empty output."""
    out = [max(x, y) for x, y in zip(reversed(a), reversed(b))]
    longer = a if len(a) >= len(b) else b
    numel = prod(int(d) for d in longer[:len(longer) - len(out)]) * prod(out)
    if numel <= 0:
        return 0
    return numel // _span([int(d) for d in a], [int(d) for d in b])
