"""Structural identity of modules, and traces assembled from cached per-block traces.

Used by :class:`ftmodel.oracle.CostOracle`; see its module docstring for what invalidates the
cache.

Structure key
-------------
:func:`structure_key` is a hashable summary of everything a module's fake-tensor trace can
depend on: its class (the class object, so a redefined class is a different key), its own
attributes other than ``nn.Module``'s bookkeeping (hyper-parameters such as ``kernel_size``,
``groups``, ``use_residual``, ``eps``, ``inplace``), the names, shapes and dtypes of its
parameters and buffers (not their values or devices: fake tracing never reads values), and its
children's keys in order. Attribute values must be plain data (numbers, strings, None, tuples,
lists, dicts, sets, dtypes, devices, enums), functions or classes (by identity), or tensors
(by shape and dtype); any other object, a per-instance ``forward``, or forward hooks on the
module make it :class:`Uncacheable` (it is then traced every time).

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
"""

from __future__ import annotations

import enum
import types
from collections import Counter
from collections.abc import Callable, Hashable
from dataclasses import dataclass, fields
from typing import Any

import torch
from torch import nn
from torch._subclasses.fake_tensor import FakeTensorMode

from ftmodel.errors import FtmodelError
from ftmodel.frameworks.base import Kernel, Program, kernel_events
from ftmodel.tracing.dispatch import _to_meta
from ftmodel.tracing.inputs import InputSpec, ModelInputs, _as_inputs, resolve_inputs
from ftmodel.segment_trace import (_COUNTERS, _RECORD_REST, SegmentTrace, TensorMeta,
                                   trace_segment)
from ftmodel.tracing.records import OpRecord, Trace

__all__ = [
    "Plan",
    "SegmentTrace",
    "TensorMeta",
    "TraceCache",
    "Uncacheable",
    "input_meta",
    "plan_of",
    "structure_key",
]

_BASE_ATTRS = frozenset(nn.Module().__dict__)
_EXACT = frozenset({int, float, bool, str, bytes, type(None), torch.dtype, torch.device,
                    torch.Size, torch.memory_format, torch.layout})
_BY_IDENTITY = (enum.Enum, type, types.FunctionType, types.BuiltinFunctionType,
                types.MethodType)
_LIST, _SET, _DICT, _TENSOR = object(), object(), object(), object()  # markers: no collisions
_OPERAND_FIELDS = tuple(f for f in _RECORD_REST if f in ("reads", "writes"))
if tuple(f.name for f in fields(OpRecord))[:2] != ("index", "module_path"):
    raise ImportError("ftmodel.structure expects OpRecord to start with index, module_path")


class Uncacheable(FtmodelError):
    """A module whose trace cannot be keyed by structure (the message says why)."""


def _value_key(value: Any, attr: str) -> Hashable:
    t = type(value)
    if t in _EXACT:
        return value  # type: ignore[no-any-return]
    if t is tuple:
        for v in value:
            if type(v) not in _EXACT:
                return tuple(_value_key(v, attr) for v in value)
        return value  # type: ignore[no-any-return]
    if isinstance(value, _BY_IDENTITY):
        return value
    if isinstance(value, torch.Tensor):
        return (_TENSOR, tuple(value.shape), value.dtype)
    if isinstance(value, (tuple, list)):
        return (_LIST, t, tuple(_value_key(v, attr) for v in value))
    if isinstance(value, (set, frozenset)):
        return (_SET, frozenset(_value_key(v, attr) for v in value))
    if isinstance(value, dict):
        return (_DICT, tuple((_value_key(k, attr), _value_key(v, attr))
                             for k, v in value.items()))
    raise Uncacheable(f"attribute {attr!r} holds a {t.__name__}, which has no structural key")


class _Walk:
    """What a key walk collects besides the key: ids of modules and tensors (to detect sharing
    between segments) and the device of the first parameter not on the meta device."""

    __slots__ = ("canon", "device", "ids")

    def __init__(self, intern: dict[Hashable, int] | None = None) -> None:
        self.ids: set[int] = set()
        self.device: torch.device | None = None
        # with ``intern``, equal keys become one small int (their number in ``intern``), so a
        # parent's key holds its children's numbers: hashing and comparing it never walks
        # into the children again
        base = getattr(intern, "base", 0)  # numbers handed out before the table was cleared
        self.canon: Callable[[Hashable], Hashable] = (
            (lambda k: k) if intern is None else
            (lambda k: intern.setdefault(k, base + len(intern))))


_OWN_ATTRS: dict[type, tuple[int, tuple[str, ...]]] = {}  # class -> (len(__dict__), names)


def _own_key(module: nn.Module, walk: _Walk) -> Hashable:
    """The module's class, own attributes, parameter and buffer shapes (children excluded).

    Own attributes are those not in a bare ``nn.Module``'s ``__dict__``; their names are cached
    per class and reused while an instance's ``__dict__`` has the cached size and names.
    """
    d = module.__dict__
    if "forward" in d:
        raise Uncacheable("has a per-instance forward")
    if d["_forward_hooks"] or d["_forward_pre_hooks"]:
        raise Uncacheable("has forward hooks")
    cls = type(module)
    hit = _OWN_ATTRS.get(cls)
    try:
        if hit is None or hit[0] != len(d):
            raise KeyError
        names = hit[1]
        values = tuple(map(d.__getitem__, names))
    except KeyError:
        names = tuple(k for k in d if k not in _BASE_ATTRS)
        _OWN_ATTRS[cls] = (len(d), names)
        values = tuple(map(d.__getitem__, names))
    kinds = set(map(type, values))
    if not kinds <= _EXACT:  # tuples are exact only if their items are
        values = tuple(_value_key(v, k) for k, v in zip(names, values))
    key: list[Any] = [cls, names, values]
    ids = walk.ids
    ids.add(id(module))
    params = d["_parameters"]
    for group in (params, d["_buffers"]):
        key.append(None)  # separates attributes, parameters and buffers
        for k, t in group.items():
            key.append(k)
            if t is None:
                key.append(None)
                continue
            key.append(t.shape)
            key.append(t.dtype)
            ids.add(id(t))
            if walk.device is None and group is params and not t.is_meta:
                walk.device = t.device
    return walk.canon(tuple(key))


def _key(module: nn.Module, walk: _Walk, root: bool = False) -> Hashable:
    try:
        own = _own_key(module, walk)
    except Uncacheable as err:
        raise _NoKey(str(err), []) from None
    children: list[Any] = []
    for k, c in module._modules.items():
        children.append(k)
        if c is None:
            children.append(None)
            continue
        try:
            children.append(_key(c, walk))
        except _NoKey as err:
            err.path.insert(0, k)
            raise
    node = (own, tuple(children))
    return node if root else walk.canon(node)  # roots (whole candidates) are not interned


class _NoKey(Exception):
    def __init__(self, reason: str, path: list[str]) -> None:
        super().__init__(reason)
        self.reason, self.path = reason, path


def structure_key(module: nn.Module) -> Hashable:
    """The hashable structural identity of ``module`` (see the module docstring); raises
    :class:`Uncacheable` naming the submodule and attribute that has none."""
    return _checked_key(module, _Walk(), "")


def _checked_key(module: nn.Module, walk: _Walk, path: str, root: bool = False) -> Hashable:
    try:
        return _key(module, walk, root)
    except _NoKey as err:
        where = ".".join(([path] if path else []) + err.path) or type(module).__name__
        raise Uncacheable(f"module {where!r} {err.reason}") from None


def input_meta(model: nn.Module, inputs: InputSpec, batch: int, dtype: torch.dtype,
               param_device: torch.device | None) -> tuple[ModelInputs, tuple[TensorMeta, ...]]:
    """The forward arguments the tracer would build for ``model`` at ``batch`` (as meta or fake
    tensors, no data) and their metadata as the tracer makes them: floating-point dtypes cast to
    ``dtype``, every tensor on the tracer's target device (the first input not on the meta
    device, else ``param_device``, the model's first such parameter, else the CPU)."""
    if inputs is None or (callable(inputs) and not isinstance(inputs, torch.Tensor)):
        with FakeTensorMode(allow_non_fake_inputs=True):
            resolved = resolve_inputs(model, inputs, batch)
            given = resolved.tensors()
    else:
        resolved = resolve_inputs(model, _to_meta(inputs, {}), batch)
        given = _as_inputs(inputs).tensors()
    device = next((t.device for t in given if t.device.type != "meta"),
                  param_device or torch.device("cpu"))
    return resolved, tuple(TensorMeta(tuple(t.shape), tuple(t.stride()),
                                      dtype if t.is_floating_point() else t.dtype, device)
                           for t in resolved.tensors())


@dataclass(frozen=True)
class Plan:
    """A model opened into Sequential containers and segments, in call order.

    ``steps``: ``(path, None)`` for a container call, ``(path, module)`` for a segment;
    ``keys``: the segments' structure keys (None where uncacheable); ``key``: the whole model's
    structure key (None where uncacheable, with ``why``); ``chain``: whether the trace can be
    assembled; ``device``: the device of the model's first parameter not on the meta device.
    """

    steps: tuple[tuple[str, nn.Module | None], ...]
    keys: tuple[Hashable | None, ...]
    key: Hashable | None
    chain: bool
    device: torch.device | None
    why: str = ""


def _is_chain(m: nn.Module) -> bool:
    d = m.__dict__
    return (type(m).forward is nn.Sequential.forward and type(m).__call__ is nn.Module.__call__
            and "forward" not in d and not d["_forward_hooks"] and not d["_forward_pre_hooks"])


def plan_of(model: nn.Module, intern: dict[Hashable, int] | None = None) -> Plan:
    """Open ``model`` into segments and compute the structure keys (see the module doc).

    ``intern`` (e.g. :attr:`TraceCache.intern`) numbers the distinct keys, so the plan's keys
    are small ints, equal for equal structures and comparable only with keys made with the same
    ``intern``; it grows with the number of distinct module structures seen."""
    steps: list[tuple[str, nn.Module | None]] = []
    keys: list[Hashable | None] = []
    walk = _Walk(intern)
    why: list[str] = []
    shared = False

    def visit(m: nn.Module, path: str) -> Hashable | None:
        nonlocal shared
        if _is_chain(m):  # a container: its call is counted, its children are opened
            if path:
                steps.append((path, None))
            own = _own_key(m, walk)  # a chain has no hooks or own forward: never raises
            sub = tuple((n, visit(c, f"{path}.{n}" if path else n))
                        for n, c in m._modules.items() if c is not None)
            if any(k is None for _, k in sub):
                return None
            return walk.canon((own, sub)) if path else (own, sub)
        seg = _Walk(intern)
        key: Hashable | None
        try:
            key = _checked_key(m, seg, path)
        except Uncacheable as err:
            why.append(str(err))
            key = None
            seg.ids = {id(x) for x in m.modules()} | {id(t) for t in m.parameters()} | {
                id(t) for t in m.buffers()}
            seg.device = next((t.device for t in m.parameters() if t.device.type != "meta"),
                              None)
        shared = shared or not seg.ids.isdisjoint(walk.ids)
        walk.ids |= seg.ids
        walk.device = walk.device or seg.device
        steps.append((path, m))
        keys.append(key)
        return key

    if not _is_chain(model):
        try:
            whole: Hashable | None = _checked_key(model, walk, "", root=True)
        except Uncacheable as err:
            whole, why = None, [str(err)]
            walk.device = next((t.device for t in model.parameters()
                                if t.device.type != "meta"), None)
        return Plan((), (), whole, False, walk.device, "; ".join(why))
    whole = visit(model, "")
    return Plan(tuple(steps), tuple(keys), whole, not shared, walk.device, "; ".join(why))


class KeyNumbers(dict):  # type: ignore[type-arg]
    """A structure key -> number table (see :func:`plan_of`) that never hands out a number
    twice: :meth:`clear` starts the next numbers after the last one, so a key made before the
    clear (e.g. in another oracle's program cache) never equals one made after it."""

    base = 0

    def clear(self) -> None:
        self.base += len(self)
        super().clear()


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
                            lambda placed, gmap: _relocate_as(OpRecord, records, placed, gmap,
                                                              _OPERAND_FIELDS))
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
            _relocate_as(Kernel, kernels, placed[0], gmap, _KERNEL_OPERANDS)
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


_NEW_RECORD = not hasattr(OpRecord, "__post_init__") and not hasattr(OpRecord, "__slots__")


def _placed(seg: SegmentTrace, path: str) -> list[dict[str, Any]]:
    """``seg``'s records as field dicts with module paths under ``path`` (relocated by
    :func:`_relocate_as`)."""
    names = ("index", "module_path") + _RECORD_REST
    return [dict(zip(names, (0, f"{path}.{rel}" if rel else path) + rest))
            for rel, rest in seg.records]


_KERNEL_OPERANDS = ("reads", "writes")
_NEW_KERNEL = not hasattr(Kernel, "__post_init__") and not hasattr(Kernel, "__slots__")


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
                 gmap: list[int] | None, operands: tuple[str, ...]) -> None:
    """Append ``cls`` objects (OpRecord or Kernel) built from the field dicts ``placed``, with
    storage ids mapped through ``gmap`` (None: unchanged); records are re-indexed after
    ``out``'s."""
    n = len(out)
    append = out.append
    new, setattr_ = object.__new__, object.__setattr__
    fast = _NEW_RECORD if cls is OpRecord else _NEW_KERNEL if cls is Kernel else False
    indexed = cls is OpRecord
    for i, tmpl in enumerate(placed):
        d = tmpl.copy()
        if indexed:
            d["index"] = n + i
        if gmap is not None:
            for f in operands:
                d[f] = tuple([(gmap[sid], nbytes) for sid, nbytes in d[f]])
        if fast:  # a frozen dataclass without __post_init__: skip its slow __init__
            r = new(cls)
            setattr_(r, "__dict__", d)
        else:
            r = cls(**d)
        append(r)
