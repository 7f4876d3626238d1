"""How many built samples a calibration holds at once: chunks bounded by this machine's memory.

A framework's curve times each sample through an artifact of its own (an ONNX Runtime session,
a frozen TorchScript graph), which holds its own copy of the sample's weights and, for ONNX
Runtime, an arena as large as the sample's activations. Built all at once, ONNX Runtime's
samples of one curve outgrew a 23 GB VM's memory (the calibration was killed at a resident set
of 24 GB). So samples are built and timed in chunks: a chunk closes once the memory the process
has allocated (:func:`ftmodel.heap.heap_in_use_bytes`) has grown by :data:`MEMORY_SHARE` of the
memory that was available when the curve began (:func:`ftmodel.machine.available_memory_bytes`),
or after :data:`MAX_ITEMS` samples where the system says neither. Each chunk is timed in
interleaved rounds with the samples every chunk needs (a family's floor), so a time and the
floor it is taken from always come from the same rounds.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass
from typing import TypeVar

from ftmodel.heap import heap_in_use_bytes
from ftmodel.machine import available_memory_bytes
from ftmodel.measure import Measurement

__all__ = ["MAX_ITEMS", "MEMORY_SHARE", "ChunkBudget", "time_in_chunks"]

K = TypeVar("K", bound=Hashable)

MEMORY_SHARE = 0.35  # of the memory available at the start, per chunk
MAX_ITEMS = 64  # samples per chunk where memory cannot be read


@dataclass
class ChunkBudget:
    """Counts what a chunk holds; :meth:`add` says when to time it and let it go.

    ``limit_bytes``: growth of the process's allocated memory a chunk may reach (None: not
    known here, only ``max_items`` counts); ``max_items``: samples per chunk at most."""

    limit_bytes: int | None
    max_items: int = MAX_ITEMS
    start_bytes: int | None = None
    items: int = 0

    @classmethod
    def for_this_machine(cls, share: float = MEMORY_SHARE, max_items: int = MAX_ITEMS
                         ) -> ChunkBudget:
        """A budget of ``share`` of the memory available now, if both it and the process's
        allocated memory can be read here."""
        available = available_memory_bytes()
        limit = int(available * share) if available is not None and \
            heap_in_use_bytes() is not None else None
        budget = cls(limit, max_items)
        budget.begin()
        return budget

    def begin(self) -> None:
        """Start a new chunk (after the previous one was timed and released)."""
        self.start_bytes = heap_in_use_bytes()
        self.items = 0

    def grown_bytes(self) -> int | None:
        """Allocated memory gained since the chunk began, where it can be read."""
        now = heap_in_use_bytes()
        if now is None or self.start_bytes is None:
            return None
        return now - self.start_bytes

    def add(self) -> bool:
        """Count one more sample built into the chunk; True when the chunk is full."""
        self.items += 1
        if self.items >= self.max_items:
            return True
        grown = self.grown_bytes()
        return self.limit_bytes is not None and grown is not None and grown >= self.limit_bytes


def time_in_chunks(fixed: Mapping[K, Callable[[], object]],
                   items: Iterable[tuple[K, Callable[[], object]]],
                   measure: Callable[[dict[K, Callable[[], object]]], Mapping[K, Measurement]],
                   ) -> dict[K, tuple[Measurement, dict[K, Measurement]]]:
    """Time callables that hold much memory a chunk at a time: ``items`` is drawn (built) until
    the chunk is full (:meth:`ChunkBudget.for_this_machine`), then ``measure`` times the chunk
    with ``fixed`` (a family's floor, a one-layer chain) in the same rounds and the chunk is let
    go before the next is built. Returns key -> (its measurement, ``fixed``'s measurements in
    the same rounds); a fixed key gets those of the first chunk (``fixed`` is timed alone once
    when ``items`` is empty)."""
    budget = ChunkBudget.for_this_machine()
    out: dict[K, tuple[Measurement, dict[K, Measurement]]] = {}
    chunk: dict[K, Callable[[], object]] = {}

    def time_chunk() -> None:
        timed = measure({**fixed, **chunk})
        with_fixed = {key: timed[key] for key in fixed}
        for key in fixed:
            out.setdefault(key, (timed[key], with_fixed))
        for key in chunk:
            out[key] = (timed[key], with_fixed)
        chunk.clear()
        gc.collect()  # the chunk's sessions and graphs go before the next chunk is built
        budget.begin()

    for key, fn in items:
        chunk[key] = fn
        del fn
        if budget.add():
            time_chunk()
    if chunk or (fixed and not out):
        time_chunk()
    return out
