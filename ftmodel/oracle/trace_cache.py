"""Traces assembled from cached per-block traces, and eager Programs from cached kernels.

Used by :class:`ftmodel.oracle.CostOracle`; see its module docstring for what invalidates the
cache, and :mod:`ftmodel.oracle.structure` for the structure keys and the plan.

Assembly
--------
A model whose ``forward`` is ``nn.Sequential``'s (recursively: Sequentials inside it are opened
too) is a chain of *segments*, the first non-Sequential modules down the tree. Each segment is
traced on its own, on fake tensors, once per (structure key, input shape/stride/dtype/device,
dtype) — the :class:`TraceCache` — and the model's Trace is assembled from the pieces: records
re-indexed and their module paths prefixed with the segment's path, module calls summed with
one call per Sequential container. The result equals the Trace of tracing the whole model
(``tests/oracle/test_cost_oracle.py`` checks it). Models that are not such chains, share a module instance
between segments, or contain a segment that could not be traced on fake tensors are traced
whole.

For eager, whose lowering is one kernel per launching record, :meth:`TraceCache.assemble_eager`
builds the Program from each segment's kernels the same way, without a Trace. A segment's
kernels are cached per path (:class:`_PlacedKernels`), and so are the kernel tuples relocated
to the last :data:`MAX_PLACEMENTS` distinct storage-id offsets the segment was placed at (one
segment keeps its offset across candidates that differ only after it); Kernels are immutable,
so programs share them. Everything is dropped by :meth:`TraceCache.clear`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field, fields
from typing import Any, NamedTuple, cast

import torch
from torch import nn

from ftmodel.program import Kernel, Program, kernel_events
from ftmodel.oracle.segment_trace import (RECORD_REST, TRACE_COUNTERS, EagerBlock, SegmentTrace,
                                          TensorMeta, trace_segment)
from ftmodel.plain_objects import maker
from ftmodel.oracle.structure import KeyNumbers, Plan
from ftmodel.tracing.variants import planes_of, selection_threads
from ftmodel.tracing.records import OpRecord, Trace

__all__ = ["Part", "TraceCache"]

_OPERANDS = ("reads", "writes")  # storage-id fields of records and kernels
if tuple(f.name for f in fields(OpRecord))[:2] != ("index", "module_path") or not (
        set(_OPERANDS) <= set(RECORD_REST)):
    raise ImportError("ftmodel.oracle.trace_cache expects OpRecord to start with index, module_path "
                      "and to carry reads, writes")


class TraceCache:
    """Per-segment traces keyed by (structure key, input TensorMeta, dtype); shareable between
    oracles of different frameworks (traces do not depend on the framework or the profile)."""

    def __init__(self) -> None:
        self._data: dict[Hashable, SegmentTrace] = {}
        self.intern = KeyNumbers()  # see plan_of
        self._placed: dict[tuple[int, str, Any], Any] = {}  # (id(seg), path, placer)
        # per segment, its eager kernels wherever placed: id(seg) -> (seg, kernels)
        self._seg_kernels: dict[int, tuple[SegmentTrace, _SegmentKernels]] = {}
        self._place_eager = self._placed_kernels  # one object: part of _placed's keys
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._data)

    def clear(self) -> None:
        self._data.clear()
        self.intern.clear()
        self._placed.clear()
        self._seg_kernels.clear()
        self.hits = self.misses = 0

    def segment(self, module: nn.Module, key: Hashable | None, meta: TensorMeta,
                dtype: torch.dtype) -> SegmentTrace:
        """The cached trace of ``module`` on an input described by ``meta`` (traced on a miss;
        an uncacheable module, ``key is None``, is traced every time). Keyed also by the
        thread count convolution backends are selected for (:func:`ftmodel.tracing.variants.
        backend_threads`): a cache shared by oracles of profiles calibrated with different
        counts keeps a trace for each."""
        full = None if key is None else (key, meta, dtype, selection_threads())
        if full is not None:
            hit = self._data.get(full)
            if hit is not None:
                self.hits += 1
                return hit
        self.misses += 1
        seg = trace_segment(module, meta, dtype)
        if full is not None:
            self._data[full] = seg
        return seg

    def _walk(self, plan: Plan, first: TensorMeta, dtype: torch.dtype,
              place: Callable[[SegmentTrace, str], Any],
              emit: Callable[[SegmentTrace, Any, int, int | None], None],
              calls: dict[str, int] | None = None) -> _Walked | None:
        """Walk the plan's segments in call order: ``emit(seg, placed, base, in_global)`` each
        segment with its ``place(seg, path)`` (cached per segment and path) and how its local
        storage ids map to global ones (:func:`_gmap`). Module calls are summed per path into
        ``calls`` when given. Returns the module calls, counters, the output's global storage
        id and meta (:class:`_Walked`), or None if the trace cannot be assembled."""
        n_calls = 1
        if calls is not None:
            calls[""] = 1
        meta = first
        counters = dict.fromkeys(TRACE_COUNTERS, 0)
        g_in: int | None = None  # global storage id of the current segment's input, if known
        same = True  # whether the chain's output so far is its input's storage
        n_sids = 0  # global storage ids handed out so far
        keys = iter(plan.keys)
        cache = self._placed
        for path, mod in plan.steps:
            if mod is None:
                n_calls += 1
                if calls is not None:
                    calls[path] = calls.get(path, 0) + 1
                continue
            if meta.dtype.is_floating_point and meta.dtype != dtype:
                return None  # the tracer would cast this segment's input: not the same trace
            key = next(keys)
            seg = self.segment(mod, key, meta, dtype)
            if not seg.relocatable or seg.out is None:
                return None
            for rel, count in seg.module_calls:
                n_calls += count
                if calls is not None:
                    full = f"{path}.{rel}" if rel else path
                    calls[full] = calls.get(full, 0) + count
            for name, count in seg.counters:
                counters[name] += count
            # local storage ids -> global: the input keeps its global id, the others are new,
            # in order of first appearance (the order the whole trace would number them in)
            in_global = g_in if seg.in_sid is not None else None
            ck = (id(seg), path, place)
            placed = cache.get(ck) if key is not None else None
            if placed is None:
                placed = place(seg, path)
                if key is not None:
                    cache[ck] = placed
            emit(seg, placed, n_sids, in_global)
            same = same and seg.out_is_in
            if seg.out_is_in:  # the output is the input: its id, now known if it was used
                if g_in is None and seg.in_sid is not None:
                    g_in = _global_sid(seg, seg.in_sid, n_sids, in_global)
            else:
                g_in = (None if seg.out_sid is None else
                        _global_sid(seg, seg.out_sid, n_sids, in_global))
            n_sids += seg.n_sids - (in_global is not None)
            meta = seg.out
        return _Walked(n_calls, counters, g_in, meta, same)

    def _placed_kernels(self, seg: SegmentTrace, path: str) -> _PlacedKernels:
        """``seg``'s eager kernels placed at ``path``; the path-independent part
        (:func:`_segment_kernels`) is made once per segment."""
        hit = self._seg_kernels.get(id(seg))
        if hit is None or hit[0] is not seg:
            hit = (seg, _segment_kernels(seg))
            self._seg_kernels[id(seg)] = hit
        return _placed_kernels(hit[1], path)

    def assemble(self, model: nn.Module, plan: Plan, first: TensorMeta, dtype: torch.dtype
                 ) -> Trace | None:
        """The whole model's Trace from segment traces, or None if it cannot be assembled."""
        records: list[OpRecord] = []
        calls: dict[str, int] = {}

        def emit(seg: SegmentTrace, placed: list[dict[str, Any]], base: int,
                 in_global: int | None) -> None:
            _relocate_as(OpRecord, records, placed, _gmap(seg, base, in_global))

        walked = self._walk(plan, first, dtype, _placed, emit, calls)
        if walked is None:
            return None
        n_calls, counters = walked.n_calls, walked.counters
        batch = first.shape[0] if first.shape else 1
        return Trace(records=tuple(records), n_module_calls=n_calls,
                     module_calls=calls, batch=batch, fake=True, warnings=(),
                     meta={"model": type(model).__name__}, **counters)

    def assemble_eager(self, plan: Plan, first: TensorMeta, dtype: torch.dtype
                       ) -> Program | None:
        """``eager.lower(self.assemble(...))`` without building the Trace: each segment's
        kernels (one per launching record) are cached and relocated like its records; None if
        the trace cannot be assembled."""
        got = self.assemble_eager_parts(plan, first, dtype)
        return None if got is None else got[0]

    def assemble_eager_parts(self, plan: Plan, first: TensorMeta, dtype: torch.dtype,
                             relocate: bool = True
                             ) -> tuple[Program, tuple[Part, ...]] | None:
        """:meth:`assemble_eager` and the segments its kernels come from, in order.

        ``relocate=False`` leaves each segment's kernels with the segment's own storage ids
        (the parts say how they map to the program's, see :func:`_gmap`): everything else in
        the Program is the same, and building it costs no new Kernel objects. For a caller that
        takes operand identities from the parts (:class:`ftmodel.oracle.device_cache.DeviceCache`),
        never from the kernels."""
        got = self._eager(plan, first, dtype, relocate)
        return None if got is None else got[:2]

    def eager_block(self, plan: Plan, first: TensorMeta, dtype: torch.dtype
                    ) -> EagerBlock | None:
        """The eager Program of a chain on its own (relocated) with the storage ids its input
        and output have in it: what :mod:`ftmodel.oracle.composed` summarises of one block of
        a search space; None if the trace cannot be assembled."""
        got = self._eager(plan, first, dtype, True)
        if got is None:
            return None
        program, parts, w = got  # the first segment, placed at base 0, keeps its input's id
        return EagerBlock(program, parts[0].seg.in_sid if parts else None, w.out_sid, w.out,
                          w.out_is_in)

    def _eager(self, plan: Plan, first: TensorMeta, dtype: torch.dtype, relocate: bool
               ) -> tuple[Program, tuple[Part, ...], _Walked] | None:
        kernels: list[Kernel] = []
        parts: list[Part] = []
        n_view = n_alloc = 0

        def emit(seg: SegmentTrace, placed: _PlacedKernels, base: int, in_global: int | None
                 ) -> None:
            nonlocal n_view, n_alloc
            moved = relocate and (base or in_global is not None)
            ks = placed.relocated.get((base, in_global)) if moved else placed.local
            if ks is None:
                ks = _kernels_of(placed.templates, _gmap(seg, base, in_global))
                if len(placed.relocated) >= MAX_PLACEMENTS:
                    del placed.relocated[next(iter(placed.relocated))]  # the oldest
                placed.relocated[(base, in_global)] = ks
            kernels.extend(ks)
            names.extend(placed.events)
            parts.append(Part(seg, placed.local, base, in_global))
            n_view += placed.n_view
            n_alloc += placed.n_alloc

        names: list[str] = []
        walked = self._walk(plan, first, dtype, self._place_eager, emit)
        if walked is None:
            return None
        n_calls, counters = walked.n_calls, walked.counters
        ks = tuple(kernels)
        events = Counter(names)  # kernel_events(ks), as eager.lower builds them, in its order
        events["module_call"] = n_calls
        events["py_call"] = counters["n_py_calls"]
        events["view"] = n_view
        events["alloc"] = n_alloc
        program = Program("eager", ks, dict(events), first.shape[0] if first.shape else 1, ())
        return program, tuple(parts), walked


class _Walked(NamedTuple):
    """Module calls, the Trace's counters, and the chain's output: its global storage id (None:
    not an operand), meta and whether it is the input's storage (:meth:`TraceCache._walk`)."""
    n_calls: int
    counters: dict[str, int]
    out_sid: int | None
    out: TensorMeta | None
    out_is_in: bool


# relocated kernel tuples kept per placed segment (one per distinct storage-id offset)
MAX_PLACEMENTS = 16


class Part(NamedTuple):
    """One segment of an assembled eager Program: its trace, its kernels with the segment's own
    storage ids (``local``; the program's are mapped by :func:`_gmap` of ``base`` and
    ``in_global``)."""

    seg: SegmentTrace
    local: tuple[Kernel, ...]
    base: int  # global storage ids handed out before the segment
    in_global: int | None  # the global id its input storage keeps (None: numbered as new)


def _global_sid(seg: SegmentTrace, sid: int, base: int, in_global: int | None) -> int:
    """The global storage id of ``seg``'s local ``sid`` (see :func:`_gmap`)."""
    if in_global is None:
        return base + sid
    in_sid = seg.in_sid
    assert in_sid is not None  # in_global is given only for a segment that reads its input
    return in_global if sid == in_sid else base + sid - (sid > in_sid)


def _gmap(seg: SegmentTrace, base: int, in_global: int | None) -> list[int] | None:
    """Local storage id -> global one for ``seg`` placed after ``base`` global ids (None: the
    identity): the input storage (``seg.in_sid``) keeps ``in_global`` when given, the others
    are numbered from ``base`` on, in order."""
    if in_global is None and base == 0:
        return None
    return [_global_sid(seg, sid, base, in_global) for sid in range(seg.n_sids)]


def _placed(seg: SegmentTrace, path: str) -> list[dict[str, Any]]:
    """``seg``'s records as field dicts with module paths under ``path`` (relocated by
    :func:`_relocate_as`)."""
    names = ("index", "module_path") + RECORD_REST
    return [dict(zip(names, (0, f"{path}.{rel}" if rel else path) + rest))
            for rel, rest in seg.records]


# frozen dataclasses without __post_init__ or __slots__: built by setting __dict__ (their
# __init__ is slow); others through their constructor
_MAKE = {c: maker(c) for c in (OpRecord, Kernel)}  # a class from its field dict, fast


@dataclass
class _PlacedKernels:
    """A segment's eager kernels at one path: field dicts (``templates``, exactly the Kernels
    :func:`ftmodel.frameworks.eager.lower` makes of its records), the Kernels with the
    segment's own storage ids (``local``) and their host events (``kernel:<class>``, grouped by
    class in order of first appearance, which a Counter of the whole program's keeps), its
    numbers of view and alloc records, and the kernel tuples already relocated, by (base,
    in_global)."""

    templates: list[dict[str, Any]]
    local: tuple[Kernel, ...]
    events: list[str]
    n_view: int
    n_alloc: int
    relocated: dict[tuple[int, int | None], tuple[Kernel, ...]] = field(default_factory=dict)


@dataclass(frozen=True)
class _SegmentKernels:
    """What :func:`_placed_kernels` makes of a segment wherever it is placed: its kernels' field
    dicts with module paths relative to the segment, their host events, and its numbers of
    view and alloc records."""

    templates: tuple[dict[str, Any], ...]
    events: list[str]
    n_view: int
    n_alloc: int


_AT = {f: i for i, f in enumerate(RECORD_REST)}


def _segment_kernels(seg: SegmentTrace) -> _SegmentKernels:
    """``seg``'s eager kernels (one per launching record, as ``eager.lower`` makes them) with
    module paths relative to the segment."""
    at = _AT
    out, n_view, n_alloc = [], 0, 0
    for rel, rest in seg.records:
        cls = rest[at["op_class"]]
        n_view += cls == "view"
        n_alloc += cls == "alloc"
        if not rest[at["launches"]]:
            continue
        out.append({"op_class": cls, "macs": rest[at["macs"]],
                    "bytes_read": rest[at["bytes_read"]],
                    "bytes_written": rest[at["bytes_written"]],
                    "module_path": rel,
                    "members": (rest[at["op"]],), "dtype": rest[at["dtype"]],
                    "variant": rest[at["variant"]], "bytes_weights": rest[at["bytes_weights"]],
                    "reads": rest[at["reads"]], "writes": rest[at["writes"]],
                    "inner": rest[at["inner"]],
                    "planes": planes_of(rest[at["op"]], rest[at["input_shapes"]]),
                    "bytes_window_reads": rest[at["bytes_window_reads"]]})
    events = list(kernel_events(_kernels_of(out, None)).elements())
    return _SegmentKernels(tuple(out), events, n_view, n_alloc)


def _placed_kernels(sk: _SegmentKernels, path: str) -> _PlacedKernels:
    """A segment's eager kernels (``sk``) with module paths under ``path`` (see
    :class:`_PlacedKernels`)."""
    out = [{**t, "module_path": f"{path}.{t['module_path']}" if t["module_path"] else path}
           for t in sk.templates]
    make = _MAKE[Kernel]
    # the dicts are never changed: relocation copies
    local = cast("tuple[Kernel, ...]", tuple([make(d) for d in out]))
    return _PlacedKernels(out, local, sk.events, sk.n_view, sk.n_alloc)


def _kernels_of(templates: list[dict[str, Any]], gmap: list[int] | None
                ) -> tuple[Kernel, ...]:
    out: list[Kernel] = []
    _relocate_as(Kernel, out, templates, gmap)
    return tuple(out)


def _relocate_as(cls: type[OpRecord] | type[Kernel], out: list[Any], placed: list[dict[str, Any]],
                 gmap: list[int] | None) -> None:
    """Append ``cls`` objects (OpRecord or Kernel) built from the field dicts ``placed``, with
    storage ids mapped through ``gmap`` (None: unchanged); records are re-indexed after
    ``out``'s."""
    n = len(out)
    append = out.append
    make = _MAKE[cls]
    indexed = cls is OpRecord
    for i, tmpl in enumerate(placed):
        d = tmpl.copy()
        if indexed:
            d["index"] = n + i
        if gmap is not None:
            for f in _OPERANDS:
                d[f] = tuple([(gmap[sid], nbytes) for sid, nbytes in d[f]])
        append(make(d))
