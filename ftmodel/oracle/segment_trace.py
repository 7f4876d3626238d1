"""Tracing one segment of a chain model on its own, for :mod:`ftmodel.oracle.trace_cache`.

A segment is traced on a fake input (:class:`TensorMeta`) with the ordinary tracer; what the
assembly needs besides its records is which storage ids its input and output have inside the
segment's trace (:class:`SegmentTrace`). They come from the tracer's own storage map, read inside
the segment's forward; where that map is not reachable, a :class:`_StorageObserver` (a second
dispatch layer) notes each op's operand storages instead.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, NamedTuple

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from ftmodel.errors import FtmodelError
from ftmodel.program import Program
from ftmodel.tracing.dispatch import trace
from ftmodel.tracing.recorder import StorageIds, tensors_of, storage_key
from ftmodel.tracing.records import OpRecord, Trace

__all__ = ["EagerBlock", "RECORD_REST", "SegmentTrace", "TRACE_COUNTERS", "TensorMeta",
           "trace_segment"]

RECORD_REST = tuple(f.name for f in fields(OpRecord))[2:]  # all but index, module_path


class TensorMeta(NamedTuple):
    """What a fake trace sees of a tensor: shape, stride, dtype and (fake) device."""

    shape: tuple[int, ...]
    stride: tuple[int, ...]
    dtype: torch.dtype
    device: torch.device

    @classmethod
    def of(cls, t: torch.Tensor) -> TensorMeta:
        return cls(tuple(t.shape), tuple(t.stride()), t.dtype, t.device)

    def make(self) -> torch.Tensor:
        return torch.empty_strided(self.shape, self.stride, dtype=self.dtype, device=self.device)


@dataclass(frozen=True)
class SegmentTrace:
    """One segment's trace with module paths and storage ids relative to the segment.

    Storage ids (``OpRecord.reads`` / ``writes``) are numbered from 0 in order of first
    appearance, as in any trace; ``in_sid`` / ``out_sid`` are the ids of the segment's input and
    output storages (None: never an operand), ``out_is_in`` whether they are one storage.
    """

    records: tuple[tuple[str, tuple[Any, ...]], ...]  # (relative module path, other fields)
    module_calls: tuple[tuple[str, int], ...]
    out: TensorMeta | None  # None: the output is not a single tensor
    relocatable: bool  # traced on fake tensors, every path names a module of the segment
    n_sids: int = 0
    in_sid: int | None = None
    out_sid: int | None = None
    out_is_in: bool = False
    counters: tuple[tuple[str, int], ...] = ()  # the Trace's other counters: TRACE_COUNTERS


class EagerBlock(NamedTuple):
    """A chain's eager Program on its own (:meth:`ftmodel.oracle.trace_cache.TraceCache.
    eager_block`), its input's and output's storage ids in it (None: not an operand of any
    kernel), its output's meta and whether the output is the input's storage."""

    program: Program
    in_sid: int | None
    out_sid: int | None
    out: TensorMeta | None
    out_is_in: bool


# Trace fields ftmodel.oracle.trace_cache.TraceCache.assemble builds itself; every other field must be
# an integer counter of events inside the forward (e.g. n_py_calls), summed over segments
# (Sequential containers are torch code and add none). A field of another kind makes traces
# unassemblable.
_ASSEMBLED = frozenset({"records", "n_module_calls", "module_calls", "batch", "fake",
                        "warnings", "meta"})
TRACE_COUNTERS = tuple(f.name for f in fields(Trace) if f.name not in _ASSEMBLED)




class _StorageObserver(TorchDispatchMode):  # type: ignore[no-untyped-call]
    """Sees the same aten ops as the tracer's recorder (pushed above it, inside the segment's
    forward) and notes the storage of each operand, to name the input/output storage ids."""

    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.ops: list[tuple[list[int], list[int]]] = []

    def __torch_dispatch__(self, func: Any, types_: Any, args: Any = (),
                           kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if getattr(func, "namespace", "aten") != "prim":  # as the recorder
            self.ops.append((_storage_keys((args, kwargs)), _storage_keys(out)))
        return out


def _storage_keys(tree: Any) -> list[int]:
    """The recorder's storage identity (the storage's address) of each tensor in ``tree``, in
    ``tree_flatten`` order (the recorder's operand order)."""
    return [storage_key(t) for t in tensors_of(tree)]


def _recorder_storage_ids() -> dict[int, int] | None:
    """The active tracer's map from storage address to storage id (None if the tracer's
    recorder cannot be found; the segment is then traced with a :class:`_StorageObserver`)."""
    from torch.utils._python_dispatch import _get_current_dispatch_mode_stack
    for mode in reversed(_get_current_dispatch_mode_stack()):
        ids = getattr(getattr(mode, "rec", None), "storage_ids", None)
        if isinstance(ids, StorageIds):
            return ids.by_key
    return None


def trace_segment(module: nn.Module, meta: TensorMeta, dtype: torch.dtype) -> SegmentTrace:
    """Trace ``module`` alone on a fake input described by ``meta``.

    The segment's input and output storage ids are read from the tracer's own storage map
    after the forward (the recorder keeps every storage alive, so addresses are not reused);
    where that map is not reachable, a :class:`_StorageObserver` pushed inside the forward
    notes each op's operand storages instead (slower: a second dispatch layer).
    """
    observer: _StorageObserver | None = None
    ends: dict[str, Any] = {}
    had_forward = "forward" in module.__dict__
    saved, inner = module.__dict__.get("forward"), module.forward

    def forward(*args: Any, **kwargs: Any) -> Any:
        nonlocal observer
        ends["in"] = _storage_keys((args, kwargs))
        ids = _recorder_storage_ids()
        if ids is None:
            observer = _StorageObserver()
            with observer:
                out = inner(*args, **kwargs)
        else:
            out = inner(*args, **kwargs)
        ends["out"] = _storage_keys(out)
        if ids is not None:
            ends["sids"] = {k: ids[k] for k in ends["in"] + ends["out"] if k in ids}
        ends["meta"] = TensorMeta.of(out) if isinstance(out, torch.Tensor) else None
        return out

    def make(_b: int) -> torch.Tensor:
        return meta.make()

    setattr(module, "forward", forward)  # noqa: B010 - restored below
    try:
        tr = trace(module, make, None, dtype=dtype)
    except FtmodelError:
        return SegmentTrace((), (), None, False)
    finally:
        if had_forward:
            module.__dict__["forward"] = saved
        else:
            del module.__dict__["forward"]
    names = {n for n, _ in module.named_modules(remove_duplicate=False)}
    counters = tuple((f, getattr(tr, f)) for f in TRACE_COUNTERS)
    relocatable = (tr.fake and ("sids" in ends or observer is not None
                                and len(observer.ops) == len(tr.records))
                   and all(type(v) is int for _, v in counters)
                   and all(r.module_path in names for r in tr.records)
                   and all(n in names for n in tr.module_calls))
    sid_of: dict[int, int] = {}  # storage address -> this trace's storage id
    if "sids" in ends:  # ids the recorder gave to storages that were operands
        sid_of = ends["sids"]
    elif observer is not None:
        for r, (ins, outs) in zip(tr.records, observer.ops):
            for operands, keys_ in ((getattr(r, "reads", ()), ins),
                                    (getattr(r, "writes", ()), outs)):
                if len(operands) == len(keys_):
                    sid_of.update((k, sid) for k, (sid, _) in zip(keys_, operands))
    in_keys, out_keys = ends.get("in", []), ends.get("out", [])
    in_sid = sid_of.get(in_keys[0]) if len(in_keys) == 1 else None
    out_sid = sid_of.get(out_keys[0]) if len(out_keys) == 1 else None
    n_sids = 1 + max((sid for r in tr.records for j in ("reads", "writes")
                      for sid, _ in getattr(r, j, ())), default=-1)
    records = tuple((r.module_path, tuple(getattr(r, f) for f in RECORD_REST))
                    for r in tr.records)
    return SegmentTrace(records, tuple(tr.module_calls.items()), ends.get("meta"), relocatable,
                        n_sids, in_sid, out_sid, bool(in_keys) and in_keys == out_keys, counters)
