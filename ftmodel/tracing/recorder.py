"""The op recorder the tracer (:mod:`ftmodel.tracing.dispatch`) runs under its dispatch mode.

:class:`Recorder` turns each aten call into an :class:`~ftmodel.tracing.records.OpRecord` (see
``records.py`` for the counting semantics) and keeps module paths and call counts;
:class:`DispatchRecorder` is the TorchDispatchMode that feeds it. What does not depend on an
op's arguments (its name, class and variant, except for convolutions) is computed once per op.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections import Counter
from collections.abc import Iterable, Iterator
from typing import Any

import torch
from torch import nn
from torch._subclasses.fake_tensor import FakeTensor
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from ftmodel.tracing.formulas import (MAC_CLASSES, classify, macs_of, static_traits,
                                      variant_of)
from ftmodel.tracing.records import OpRecord
from ftmodel.tracing.windows import pool_window_bytes

__all__ = ["DispatchRecorder", "Recorder", "StorageIds", "storage_key", "tensors_of"]


def tensors_of(tree: Any) -> list[torch.Tensor]:
    """The tensors of ``tree`` in ``tree_flatten`` order."""
    flat = _flat_tensors(tree)
    if flat is not None:
        return flat
    leaves, _ = tree_flatten(tree)
    return [t for t in leaves if isinstance(t, torch.Tensor)]


_Tensor = torch.Tensor
# what aten ops take besides tensors and lists: never a pytree node holding a tensor
_LEAVES = frozenset({type(None), bool, int, float, complex, str, torch.device, torch.dtype,
                     torch.layout, torch.memory_format, torch.Size, torch.SymInt,
                     torch.SymFloat, torch.SymBool})


def _flat_tensors(tree: Any) -> list[torch.Tensor] | None:
    """:func:`tensors_of` without pytree for what aten ops take and return: a tensor, a leaf
    (``_LEAVES``), a tuple/list of tensors, leaves and tuples/lists of those, or an ``(args,
    kwargs)`` pair of such a tuple and a dict of such values; None for anything else (the
    caller then uses pytree, whose order this follows)."""
    if isinstance(tree, _Tensor):
        return [tree]
    kind = type(tree)
    if kind in _LEAVES:
        return []
    items: list[Any]
    if kind is tuple and len(tree) == 2 and type(tree[0]) is tuple and type(tree[1]) is dict:
        items = [*tree[0], *tree[1].values()]
    elif kind is tuple or kind is list:
        items = tree
    else:
        return None
    out: list[torch.Tensor] = []
    for a in items:
        if isinstance(a, _Tensor):
            out.append(a)
        elif type(a) is tuple or type(a) is list:
            for b in a:
                if isinstance(b, _Tensor):
                    out.append(b)
                elif type(b) not in _LEAVES:
                    return None
        elif type(a) not in _LEAVES:
            return None
    return out


def storage_key(t: torch.Tensor) -> int:
    """Address of the storage behind ``t`` (shared by views of one tensor), else ``id(t)``."""
    try:
        return int(t.untyped_storage()._cdata)
    except (RuntimeError, NotImplementedError, AttributeError):  # sparse, nested, ...
        return id(t)


class StorageIds:
    """Small ids for tensor storages, in order of first sight: the operand identities
    (``Kernel.reads``/``writes``) the cache and allocator models follow. Tensors sharing a
    storage (views) share an id; each storage seen is kept alive, so no address is reused."""

    def __init__(self) -> None:
        self.by_key: dict[int, int] = {}  # storage address (cdata) -> small id
        self._alive: list[torch.Tensor] = []

    def operands(self, ts: list[torch.Tensor], keys: list[int] | None = None,
                 sizes: list[int] | None = None) -> tuple[tuple[int, int], ...]:
        """(storage id, bytes) of each tensor (``keys`` and ``sizes``: the tensors' storage
        keys and bytes, if already known)."""
        out = []
        ids = self.by_key
        for i, t in enumerate(ts):
            key = storage_key(t) if keys is None else keys[i]
            sid = ids.get(key)
            if sid is None:
                sid = ids[key] = len(ids)
                self._alive.append(t)
            out.append((sid, t.numel() * t.element_size() if sizes is None else sizes[i]))
        return tuple(out)


class Recorder:
    """Collects op records, module paths and call counts during one forward pass."""

    def __init__(self, module_names: dict[int, str], weight_ids: set[int] | None = None,
                 weights: Iterable[torch.Tensor] = (),
                 storage_ids: StorageIds | None = None) -> None:
        self.records: list[OpRecord] = []
        self.weight_ids = weight_ids or set()  # ids of the parameter/buffer tensors used
        # storages of the parameters/buffers: a weight read through a view (linear's w.t()) is
        # still a weight
        self.weight_storages = {storage_key(t) for t in weights}
        self.module_stack: list[str] = []
        self.module_calls: Counter[str] = Counter()
        self.module_names = module_names
        self.py_calls = 0  # Python function calls of the model's own code (not torch's)
        self.py_counter: Any = None  # the profile function counting them, while it runs
        self.py_events = 0  # calls into C by non-torch code that profile function saw
        # (frame, bytecode offset, py_events) of the Python call behind the last launching op:
        # the same as the next op's when C++ launched both (OpRecord.inner). Its frame is kept
        # alive, so no later frame can reuse its id.
        self._last_site: tuple[Any, int, int] | None = None
        self.storage_ids = storage_ids or StorageIds()  # shared with a caller's own kernels

    # -- module tracking (global hooks, removed on exit) ---------------------------------------
    def _pre_hook(self, module: nn.Module, args: Any) -> None:
        name = self.module_names.get(id(module), type(module).__name__)
        self.module_stack.append(name)
        self.module_calls[name] += 1

    def _post_hook(self, module: nn.Module, args: Any, out: Any) -> None:
        if self.module_stack:
            self.module_stack.pop()

    @contextlib.contextmanager
    def module_hooks(self) -> Iterator[None]:
        pre = nn.modules.module.register_module_forward_pre_hook(self._pre_hook)
        post = nn.modules.module.register_module_forward_hook(self._post_hook)
        try:
            yield
        finally:
            pre.remove()
            post.remove()
            self.module_stack.clear()

    def _is_max_pool1d(self, args: tuple[Any, ...]) -> bool:
        """Whether this ``max_pool2d_with_indices`` is ``F.max_pool1d`` seen through fake
        tensors: on a tensor subclass, ``max_pool1d`` takes its with-indices path (unsqueeze to
        4-d, a 2-d pool with a 1-row window, squeeze), where eager on plain CPU tensors runs
        ``max_pool1d``'s own kernel, which writes no indices and runs 5-20x faster here."""
        x = args[0] if args else None
        kernel = args[1] if len(args) > 1 else ()
        prev = self.records[-1] if self.records else None
        return (isinstance(x, torch.Tensor) and x.dim() == 4 and x.shape[2] == 1
                and isinstance(kernel, (list, tuple)) and len(kernel) == 2 and kernel[0] == 1
                and prev is not None and prev.op.startswith("aten.unsqueeze")
                and prev.output_shapes[:1] == (tuple(map(int, x.shape)),))

    # -- op recording ------------------------------------------------------------------------------
    def record(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any,
               ins: list[torch.Tensor] | None = None,
               site: tuple[Any, int, int] | None = None) -> None:
        """One OpRecord for ``func(*args, **kwargs) -> out`` (``ins``: the tensors of
        ``(args, kwargs)``, if already collected; ``site``: the Python call that reached the
        dispatcher, see ``_last_site``)."""
        op, cls, var = _traits(func)
        op_class = classify(func, args) if cls is None else cls
        if ins is None:
            ins = tensors_of((args, kwargs))
        outs = tensors_of(out)
        called = op  # (a pool's window is read off its arguments as called)
        if op == _MAX_POOL2D and self._is_max_pool1d(args):
            op, outs = _MAX_POOL1D, outs[:1]  # eager's own 1-d kernel: no indices written
        is_view = op_class in ("view", "alloc")
        first = outs[0] if outs else (ins[0] if ins else None)
        reads: tuple[tuple[int, int], ...]
        writes: tuple[tuple[int, int], ...]
        if is_view:
            macs = flops = bytes_read = bytes_written = bytes_weights = window = 0
            variant, reads, writes = "", (), ()
        else:
            sizes_in = [t.numel() * t.element_size() for t in ins]
            sizes_out = [t.numel() * t.element_size() for t in outs]
            keys_in = [storage_key(t) for t in ins]
            bytes_read, bytes_written = sum(sizes_in), sum(sizes_out)
            wids, wsto = self.weight_ids, self.weight_storages
            bytes_weights = sum([n for t, k, n in zip(ins, keys_in, sizes_in)
                                 if id(t) in wids or k in wsto])
            macs = macs_of(func, args, out) if op_class in MAC_CLASSES else 0
            flops = 2 * macs if macs else sum(t.numel() for t in outs)
            variant = variant_of(func, args) if var is None else var
            reads = self.storage_ids.operands(ins, keys_in, sizes_in)
            writes = self.storage_ids.operands(outs, None, sizes_out)
            window = pool_window_bytes(op_class, called, args, ins, outs)
        last = self._last_site
        inner = (not is_view and site is not None and last is not None and site[0] is last[0]
                 and site[1:] == last[1:])
        if not is_view:
            self._last_site = site
        self.records.append(OpRecord(
            index=len(self.records),
            module_path=self.module_stack[-1] if self.module_stack else "",
            op=op,
            op_class=op_class,
            macs=macs,
            flops=flops,
            bytes_read=bytes_read,
            bytes_written=bytes_written,
            bytes_weights=bytes_weights,
            input_shapes=tuple(tuple(map(int, t.shape)) for t in ins),
            output_shapes=tuple(tuple(map(int, t.shape)) for t in outs),
            dtype=_dtype_name(first.dtype) if first is not None else "none",
            is_view=is_view,
            launches=0 if is_view else 1,
            variant=variant,
            reads=reads,
            writes=writes,
            inner=inner,
            bytes_window_reads=window,
        ))


_MAX_POOL2D = "aten.max_pool2d_with_indices.default"
_MAX_POOL1D = "aten.max_pool1d.default"
_TRAITS: dict[int, tuple[Any, str, str | None, str | None]] = {}  # id(func) -> func, traits
_DTYPE_NAMES: dict[torch.dtype, str] = {}


def _traits(func: Any) -> tuple[str, str | None, str | None]:
    """``str(func)`` and :func:`static_traits` of an op (cached per op object)."""
    hit = _TRAITS.get(id(func))
    if hit is None or hit[0] is not func:
        hit = _TRAITS[id(func)] = (func, str(func), *static_traits(func))
    return hit[1], hit[2], hit[3]


def _dtype_name(dtype: torch.dtype) -> str:
    name = _DTYPE_NAMES.get(dtype)
    if name is None:
        name = _DTYPE_NAMES[dtype] = str(dtype).replace("torch.", "")
    return name


class DispatchRecorder(TorchDispatchMode):  # type: ignore[no-untyped-call]
    """The dispatch mode that hands each aten call under it to a :class:`Recorder`."""

    def __init__(self, rec: Recorder) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.rec = rec

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        rec = self.rec
        caller = sys._getframe(1)  # the Python frame whose call reached the dispatcher,
        while caller.f_code.co_filename in _WRAPPER_FILES and caller.f_back is not None:
            caller = caller.f_back  # past torch's wrappers of this method
        site = (caller, caller.f_lasti, rec.py_events)
        ins = tensors_of((args, kwargs))
        counter = rec.py_counter
        # an aten op on plain or fake tensors runs torch's code only (meta kernels,
        # decompositions) and the recorder ftmodel's: no Python call in there is one of the
        # model's own, so the py-call counter is off meanwhile (it would see every call)
        if (counter is not None and getattr(func, "namespace", "") in _TORCH_NAMESPACES
                and all(type(t) in _PLAIN_TENSORS for t in ins)
                and sys.getprofile() is counter):
            sys.setprofile(None)
            try:
                return self._dispatch(func, args, kwargs, ins, site)
            finally:
                sys.setprofile(counter)
        return self._dispatch(func, args, kwargs, ins, site)

    def _dispatch(self, func: Any, args: Any, kwargs: dict[str, Any],
                  ins: list[torch.Tensor], site: tuple[Any, int, int]) -> Any:
        out = func(*args, **kwargs)
        if getattr(func, "namespace", "aten") != "prim":  # prim.device etc. are metadata queries
            self.rec.record(func, args, kwargs, out, ins, site)
        return out


_TORCH_NAMESPACES = frozenset({"aten", "prim"})
# files of the Python frames torch puts between a call into C and a mode's __torch_dispatch__
# (dynamo's disable wrapper around it)
_WRAPPER_FILES = frozenset(os.path.join(os.path.dirname(torch.__file__), *parts) for parts in (
    ("_dynamo", "eval_frame.py"), ("_compile.py",), ("utils", "_python_dispatch.py")))
_PLAIN_TENSORS = frozenset({torch.Tensor, nn.Parameter, FakeTensor})
