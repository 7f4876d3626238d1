"""Traces assembled from cached per-block traces, and eager Programs from cached kernels.

Used by :class:`ftmodel.oracle.CostOracle`; see its module docstring for what invalidates the
cache, and :mod:`ftmodel.structure` for the structure keys and the plan.

Assembly
--------
A model whose ``forward`` is ``nn.Sequential``'s (recursively: Sequentials inside it are opened
too) is a chain of *segments*, the first non-Sequential modules down the tree. Each segment is
traced on its own, on fake tensors, once per (structure key, input shape/stride/dtype/device,
dtype) — the :class:`TraceCache` — and the model's Trace is assembled from the pieces: records
re-indexed and their module paths prefixed with the segment's path, module calls summed with
one call per Sequential container. The result equals the Trace of tracing the whole model
(``tests/test_oracle.py`` checks it). Models that are not such chains, share a module instance
between segments, or contain a segment that could not be traced on fake tensors are traced
whole.

For eager, whose lowering is one kernel per launching record, :meth:`TraceCache.assemble_eager`
builds the Program from each segment's kernels the same way, without a Trace.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Hashable
from dataclasses import fields
from typing import Any

import torch
from torch import nn

from ftmodel.frameworks.base import Kernel, Program, kernel_events
from ftmodel.segment_trace import (_COUNTERS, _RECORD_REST, SegmentTrace, TensorMeta,
                                   trace_segment)
from ftmodel.structure import KeyNumbers, Plan
from ftmodel.tracing.records import OpRecord, Trace

__all__ = ["TraceCache"]

_OPERANDS = ("reads", "writes")  # storage-id fields of records and kernels
if tuple(f.name for f in fields(OpRecord))[:2] != ("index", "module_path") or not (
        set(_OPERANDS) <= set(_RECORD_REST)):
    raise ImportError("ftmodel.trace_cache expects OpRecord to start with index, module_path "
                      "and to carry reads, writes")


class TraceCache:
    """Per-segment traces keyed by (structure key, input TensorMeta, dtype); shareable between
    oracles of different frameworks (traces do not depend on the framework or the profile)."""

    def __init__(self) -> None:
        self._data: dict[Hashable, SegmentTrace] = {}
        self.intern = KeyNumbers()  # see plan_of
        self._placed: dict[tuple[int, str, Any], Any] = {}  # (id(seg), path, placer)
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._data)

    def clear(self) -> None:
        self._data.clear()
        self.intern.clear()
        self._placed.clear()
        self.hits = self.misses = 0

    def segment(self, module: nn.Module, key: Hashable | None, meta: TensorMeta,
                dtype: torch.dtype) -> SegmentTrace:
        """The cached trace of ``module`` on an input described by ``meta`` (traced on a miss;
        an uncacheable module, ``key is None``, is traced every time)."""
        full = None if key is None else (key, meta, dtype)
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
              place: Callable[[SegmentTrace, str], Any], emit: Callable[[Any, list[int] | None],
                                                                         None]
              ) -> tuple[dict[str, int], dict[str, int]] | None:
        """Walk the plan's segments in call order: ``emit(placed, gmap)`` each segment's
        ``place(seg, path)`` (cached per segment and path) with its local storage ids mapped to
        global ones (None: unchanged). Returns (module calls, counters), or None if the trace
        cannot be assembled."""
        calls: dict[str, int] = {"": 1}
        meta = first
        counters = dict.fromkeys(_COUNTERS, 0)
        g_in: int | None = None  # global storage id of the current segment's input
        n_sids = 0  # global storage ids handed out so far
        keys = iter(plan.keys)
        cache = self._placed
        for path, mod in plan.steps:
            if mod is None:
                calls[path] = calls.get(path, 0) + 1
                continue
            if meta.dtype.is_floating_point and meta.dtype != dtype:
                return None  # the tracer would cast this segment's input: not the same trace
            key = next(keys)
            seg = self.segment(mod, key, meta, dtype)
            if not seg.relocatable or seg.out is None:
                return None
            for rel, count in seg.module_calls:
                full = f"{path}.{rel}" if rel else path
                calls[full] = calls.get(full, 0) + count
            for name, count in seg.counters:
                counters[name] += count
            # local storage ids -> global: the input keeps its global id, the others are new,
            # in order of first appearance (the order the whole trace would number them in)
            gmap = list(range(n_sids, n_sids + seg.n_sids))
            if g_in is not None and seg.in_sid is not None:
                gmap[seg.in_sid + 1:] = gmap[seg.in_sid:-1]
                gmap[seg.in_sid] = g_in
                n_sids -= 1
            ck = (id(seg), path, place)
            placed = cache.get(ck) if key is not None else None
            if placed is None:
                placed = place(seg, path)
                if key is not None:
                    cache[ck] = placed
            emit(placed, gmap if n_sids else None)
            n_sids += seg.n_sids
            g_in = g_in if seg.out_is_in else (None if seg.out_sid is None else
                                               gmap[seg.out_sid])
            meta = seg.out
        return calls, counters

    def assemble(self, model: nn.Module, plan: Plan, first: TensorMeta, dtype: torch.dtype
                 ) -> Trace | None:
        """The whole model's Trace from segment traces, or None if it cannot be assembled."""
        records: list[OpRecord] = []
        walked = self._walk(plan, first, dtype, _placed,
                            lambda placed, gmap: _relocate_as(OpRecord, records, placed, gmap))
        if walked is None:
            return None
        calls, counters = walked
        batch = first.shape[0] if first.shape else 1
        return Trace(records=tuple(records), n_module_calls=sum(calls.values()),
                     module_calls=calls, batch=batch, fake=True, warnings=(),
                     meta={"model": type(model).__name__}, **counters)

    def assemble_eager(self, plan: Plan, first: TensorMeta, dtype: torch.dtype
                       ) -> Program | None:
        """``eager.lower(self.assemble(...))`` without building the Trace: each segment's
        kernels (one per launching record) are cached and relocated like its records; None if
        the trace cannot be assembled."""
        kernels: list[Kernel] = []
        n_view = n_alloc = 0

        def emit(placed: tuple[list[dict[str, Any]], int, int], gmap: list[int] | None
                 ) -> None:
            nonlocal n_view, n_alloc
            _relocate_as(Kernel, kernels, placed[0], gmap)
            n_view += placed[1]
            n_alloc += placed[2]

        walked = self._walk(plan, first, dtype, _placed_kernels, emit)
        if walked is None:
            return None
        calls, counters = walked
        ks = tuple(kernels)
        events: Counter[str] = kernel_events(ks)  # as eager.lower builds them, in its order
        events["module_call"] = sum(calls.values())
        events["py_call"] = counters["n_py_calls"]
        events["view"] = n_view
        events["alloc"] = n_alloc
        return Program("eager", ks, dict(events), first.shape[0] if first.shape else 1, ())


def _placed(seg: SegmentTrace, path: str) -> list[dict[str, Any]]:
    """``seg``'s records as field dicts with module paths under ``path`` (relocated by
    :func:`_relocate_as`)."""
    names = ("index", "module_path") + _RECORD_REST
    return [dict(zip(names, (0, f"{path}.{rel}" if rel else path) + rest))
            for rel, rest in seg.records]


# frozen dataclasses without __post_init__ or __slots__: built by setting __dict__ (their
# __init__ is slow); others through their constructor
_PLAIN = {c: not hasattr(c, "__post_init__") and not hasattr(c, "__slots__")
          for c in (OpRecord, Kernel)}


def _placed_kernels(seg: SegmentTrace, path: str) -> tuple[list[dict[str, Any]], int, int]:
    """``seg``'s eager kernels as field dicts with module paths under ``path`` (exactly the
    Kernels :func:`ftmodel.frameworks.eager.lower` makes of its records), and its numbers of
    view and alloc records."""
    at = {f: i for i, f in enumerate(_RECORD_REST)}
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
                    "module_path": f"{path}.{rel}" if rel else path,
                    "members": (rest[at["op"]],), "dtype": rest[at["dtype"]],
                    "variant": rest[at["variant"]], "bytes_weights": rest[at["bytes_weights"]],
                    "reads": rest[at["reads"]], "writes": rest[at["writes"]]})
    return out, n_view, n_alloc


def _relocate_as(cls: type, out: list[Any], placed: list[dict[str, Any]],
                 gmap: list[int] | None) -> None:
    """Append ``cls`` objects (OpRecord or Kernel) built from the field dicts ``placed``, with
    storage ids mapped through ``gmap`` (None: unchanged); records are re-indexed after
    ``out``'s."""
    n = len(out)
    append = out.append
    new, setattr_ = object.__new__, object.__setattr__
    fast = _PLAIN[cls]
    indexed = cls is OpRecord
    for i, tmpl in enumerate(placed):
        d = tmpl.copy()
        if indexed:
            d["index"] = n + i
        if gmap is not None:
            for f in _OPERANDS:
                d[f] = tuple([(gmap[sid], nbytes) for sid, nbytes in d[f]])
        if fast:
            r = new(cls)
            setattr_(r, "__dict__", d)
        else:
            r = cls(**d)
        append(r)
