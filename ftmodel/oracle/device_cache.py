"""Device times of a program's kernels from memoised per-kernel and per-segment pieces.

Used by :class:`ftmodel.oracle.CostOracle`; see its module docstring for what invalidates the
cache.

What is memoised
----------------
* **Per kernel**: :meth:`~ftmodel.api.Predictor.hot_cold_times_s`, a pure function of each
  kernel's work (module path and operand storage ids aside), with the warnings pricing it
  raises.
* **Per segment** (a :class:`~ftmodel.oracle.segment_trace.SegmentTrace` of an eager program assembled
  by :meth:`ftmodel.oracle.trace_cache.TraceCache.assemble_eager_parts`): its kernels' (hot, cold)
  arrays, read from the per-kernel memo, their own host costs and bytes moved (what the
  timeline reads of each kernel), and its :func:`~ftmodel.estimate.cache.operand_events` with
  the segment's own storage ids.

A candidate's arrays are the concatenation of its segments' in order, the operand events'
storage ids mapped to the program's the way the assembly maps its kernels' (tested equal to
``operand_events`` of the program); what depends on the whole sequence (the cold fractions, the
blend, the timeline) is computed by the Predictor for every candidate, from the same numbers it
would compute itself, so the result is the same to the bit.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field, fields
from typing import Any
from operator import attrgetter

import numpy as np

from ftmodel.api import KernelArrays, Predictor
from ftmodel.estimate.cache import OperandEvents, operand_events
from ftmodel.estimate.timeline import kernel_host_costs_s
from ftmodel.program import Kernel, Program, entry_launches
from ftmodel.oracle.segment_trace import SegmentTrace
from ftmodel.oracle.trace_cache import MAX_PLACEMENTS, Part

__all__ = ["DeviceCache", "program_events"]

_KERNEL_WORK = attrgetter(*(f.name for f in fields(Kernel)
                            if f.name not in ("module_path", "reads", "writes")))
_HAS_OPERANDS = {"reads", "writes"} <= {f.name for f in fields(Kernel)}
_NO_INPUT = np.iinfo(np.int64).max  # a local storage id no event has


def _kernel_key(k: Kernel) -> Hashable:
    if _HAS_OPERANDS:
        return (_KERNEL_WORK(k), tuple(n for _, n in k.reads), tuple(n for _, n in k.writes))
    return _KERNEL_WORK(k)


@dataclass(frozen=True)
class _Segment:
    """A segment's memoised pieces (``seg`` keeps its id from being reused)."""

    seg: SegmentTrace
    hot: np.ndarray
    cold: np.ndarray
    warns: bool  # some kernel's pricing warns
    events: OperandEvents  # with the segment's own storage ids and kernel indices
    own_host_s: np.ndarray  # kernel_host_costs_s of its kernels
    bytes_total: np.ndarray
    entry: np.ndarray  # entry_launches of its kernels
    # its events' storage ids mapped to a program's, per placement (base, in_global): the
    # last MAX_PLACEMENTS ones
    mapped: dict[tuple[int, int | None], np.ndarray] = field(default_factory=dict)


class DeviceCache:
    """Memoised device times for one Predictor (see the module docstring)."""

    def __init__(self, predictor: Predictor) -> None:
        self.predictor = predictor
        self._kernels: dict[Hashable, tuple[float, float, tuple[str, ...]]] = {}
        self._segments: dict[int, _Segment] = {}  # id(seg) -> pieces

    def __len__(self) -> int:
        """Kernels with memoised device times."""
        return len(self._kernels)

    def clear(self) -> None:
        self._kernels.clear()
        self._segments.clear()

    def device_s(self, program: Program, parts: Sequence[Part] | None = None
                 ) -> KernelArrays | None:
        """:meth:`Predictor.kernel_arrays` of the program's kernels from memoised pieces
        (``parts``: the segments the kernels come from, in order, if known); None when some
        kernel's pricing warns (the Predictor then prices it, warnings and all)."""
        pred = self.predictor
        if not parts:
            hot, cold, warns = _arrays(self._rows(program.kernels))
            if warns:
                return None
            return KernelArrays(
                pred.device_times_s(program.kernels, hot, cold),
                kernel_host_costs_s(program.kernels, pred.fw_host), _bytes(program.kernels),
                entry_launches(program.kernels))
        segs = [self._segment(p) for p in parts]
        if any(s.warns for s in segs):
            return None
        hot = np.concatenate([s.hot for s in segs])
        cold = np.concatenate([s.cold for s in segs])
        events = _events(parts, segs) if pred.device_model.has_cold_data else None
        return KernelArrays(
            pred.device_times_s(program.kernels, hot, cold, events),
            np.concatenate([s.own_host_s for s in segs]),
            np.concatenate([s.bytes_total for s in segs]),
            np.concatenate([s.entry for s in segs]))

    def _rows(self, kernels: Sequence[Kernel]) -> list[tuple[float, float, tuple[str, ...]]]:
        """Each kernel's memoised (hot, cold, warnings), pricing the ones not seen yet."""
        memo = self._kernels
        keys = [_kernel_key(k) for k in kernels]
        missing = [i for i, k in enumerate(keys) if k not in memo]
        if missing:
            new = [kernels[i] for i in dict.fromkeys(missing)]
            warns: list[str] = []
            hot, cold = self.predictor.hot_cold_times_s(new, warns)
            for j, k in enumerate(new):
                w: tuple[str, ...] = ()
                if warns:  # attribute the warnings to the kernels that raise them
                    one: list[str] = []
                    self.predictor.hot_cold_times_s([k], one)
                    w = tuple(one)
                memo[_kernel_key(k)] = (float(hot[j]), float(cold[j]), w)
        return [memo[k] for k in keys]

    def _segment(self, part: Part) -> _Segment:
        hit = self._segments.get(id(part.seg))
        if hit is not None and hit.seg is part.seg:
            return hit
        made = _Segment(part.seg, *_arrays(self._rows(part.local)), operand_events(part.local),
                        kernel_host_costs_s(part.local, self.predictor.fw_host),
                        _bytes(part.local), entry_launches(part.local))
        self._segments[id(part.seg)] = made
        return made


def _arrays(rows: Sequence[tuple[float, float, tuple[str, ...]]]
            ) -> tuple[np.ndarray, np.ndarray, bool]:
    """(hot, cold) arrays of memoised kernel rows, and whether some kernel's pricing warns."""
    return (np.array([r[0] for r in rows], dtype=np.float64),
            np.array([r[1] for r in rows], dtype=np.float64), any(r[2] for r in rows))


def _events(parts: Sequence[Part], segs: Sequence[_Segment]) -> OperandEvents:
    """:func:`program_events` of ``parts``, with each part's mapped storage ids memoised per
    placement (kernels without operand identities, whose ids depend on their index in the
    program, take :func:`program_events` itself)."""
    if any(len(s.events.fallback) for s in segs):
        return program_events(parts, [s.events for s in segs])
    sids = []
    for p, s in zip(parts, segs):
        where = (p.base, p.in_global)
        got = s.mapped.get(where)
        if got is None:
            in_sid = _NO_INPUT if p.in_global is None else p.seg.in_sid
            got = _map_sids(s.events.sids, p.base, in_sid, p.in_global or 0)
            if len(s.mapped) >= MAX_PLACEMENTS:
                del s.mapped[next(iter(s.mapped))]  # the oldest
            s.mapped[where] = got
        sids.append(got)
    offsets = np.zeros(len(parts), dtype=np.int64)  # kernels before each part
    np.cumsum([len(p.local) for p in parts[:-1]], out=offsets[1:])
    owner = np.concatenate([s.events.owner for s in segs]) + np.repeat(
        offsets, [len(s.events.sids) for s in segs])
    return OperandEvents(np.concatenate(sids), np.concatenate([s.events.sizes for s in segs]),
                         np.concatenate([s.events.is_read for s in segs]), owner,
                         np.zeros(0, dtype=np.int64))


def _bytes(kernels: Sequence[Kernel]) -> np.ndarray:
    return np.array([k.bytes_total for k in kernels], dtype=np.float64)


def _map_sids(sid: np.ndarray, base: Any, in_sid: Any, in_global: Any) -> np.ndarray:
    """Segment-local storage ids -> the program's, as :func:`ftmodel.oracle.trace_cache._gmap` maps
    them (per event, or one value for all): the input's (``in_sid``) becomes ``in_global``,
    the others are numbered after ``base``, skipping the input's."""
    mapped: np.ndarray = np.where(sid == in_sid, in_global, sid + base - (sid > in_sid))
    return mapped


def program_events(parts: Sequence[Part], local: Sequence[OperandEvents]) -> OperandEvents:
    """The operand events of the program assembled from ``parts``, from each part's events with
    its own storage ids and kernel indices (``local``): kernel indices shifted by the kernels
    before the part, storage ids mapped as :func:`ftmodel.oracle.trace_cache._gmap` maps them (the
    input's to ``in_global`` when given, the others numbered from ``base`` on), and the id of a
    kernel without operand identities (``-1 - index``) renumbered with its index."""
    n = len(parts)
    which = np.repeat(np.arange(n), [len(e.sids) for e in local])  # each event's part
    offsets = np.zeros(n, dtype=np.int64)  # kernels before each part
    np.cumsum([len(p.local) for p in parts[:-1]], out=offsets[1:])
    in_sid = np.array([_NO_INPUT if p.in_global is None else p.seg.in_sid for p in parts],
                      dtype=np.int64)[which]
    sid = np.concatenate([e.sids for e in local])
    owner = np.concatenate([e.owner for e in local]) + offsets[which]
    mapped = _map_sids(sid, np.array([p.base for p in parts], dtype=np.int64)[which], in_sid,
                       np.array([p.in_global or 0 for p in parts], dtype=np.int64)[which])
    anonymous = sid < 0
    if anonymous.any():
        mapped[anonymous] = -1 - owner[anonymous]
    fallback = np.concatenate([e.fallback + off for e, off in zip(local, offsets.tolist())])
    return OperandEvents(mapped, np.concatenate([e.sizes for e in local]),
                         np.concatenate([e.is_read for e in local]), owner,
                         fallback.astype(np.int64, copy=False))
