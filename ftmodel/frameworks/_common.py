"""Helpers shared by the lowerings that build a framework's own artifact from the model.

* real inputs at a batch, cast to a dtype; eval mode under ``no_grad``;
* :class:`PositionalModule`, which gives exporters a forward of positional tensors only (the
  TorchScript-based exporters fill missing arguments with defaults positionally, which clashes
  with keyword-only models such as Hugging Face ones) and returns a flat tuple of tensors;
* :func:`module_path_from_scope`, which turns an exporter scope ("/layer1/layer1.0/conv1/Conv",
  "__module.layer1/__module.layer1.0.conv1") into a module path of the model;
* :class:`ArtifactCache`, a small LRU keyed by model identity, batch, dtype and device.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import hashlib
import io
import itertools
import logging
import os
import sys
import tempfile
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import torch
import torch.utils._pytree as pytree
from torch import nn

from ftmodel.errors import InvalidArgumentError
from ftmodel.program import Kernel
from ftmodel.tracing.inputs import InputSpec, ModelInputs, resolve_inputs
from ftmodel.tracing.records import Trace

__all__ = [
    "TORCH_DTYPES",
    "ArtifactCache",
    "PositionalModule",
    "eval_no_grad",
    "input_signature",
    "make_kernel",
    "model_in_dtype",
    "module_names",
    "module_path_from_scope",
    "real_inputs",
    "trace_dtype",
]

TORCH_DTYPES = {"fp32": torch.float32, "tf32": torch.float32, "fp16": torch.float16,
                "bf16": torch.bfloat16}
_DTYPE_NAMES = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16"}

T = TypeVar("T")


# loggers of libraries whose models or exporters ftmodel runs, quiet while they run: their
# handlers keep the stream they were created with, which redirecting stderr does not reach
_LIBRARY_LOGGERS = ("transformers",)


@contextlib.contextmanager
def silenced_output() -> Iterator[None]:
    """Discard what the enclosed code writes to stdout and stderr, Python's and the C++
    streams' alike (file descriptors 1 and 2), and what the libraries of
    :data:`_LIBRARY_LOGGERS` log: exporters print whole IR graphs from C++ when they fail,
    transformers logs notices while a model is traced, and a library must not."""
    sys.stdout.flush()
    sys.stderr.flush()
    loggers = [logging.getLogger(name) for name in _LIBRARY_LOGGERS]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.CRITICAL + 1)
    saved = [os.dup(1), os.dup(2)]
    try:
        with tempfile.TemporaryFile() as sink, contextlib.redirect_stdout(io.StringIO()), \
                contextlib.redirect_stderr(io.StringIO()):
            os.dup2(sink.fileno(), 1)
            os.dup2(sink.fileno(), 2)
            try:
                yield
            finally:
                os.dup2(saved[0], 1)
                os.dup2(saved[1], 2)
    finally:
        os.close(saved[0])
        os.close(saved[1])
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)


def trace_dtype(trace: Trace | None) -> str:
    """ftmodel's dtype name of the floating-point work in ``trace`` ("fp32" if none)."""
    if trace is not None:
        for r in trace.records:
            if r.dtype in _DTYPE_NAMES:
                return _DTYPE_NAMES[r.dtype]
    return "fp32"


def _torch_dtype(dtype: str) -> torch.dtype:
    if dtype not in TORCH_DTYPES:
        raise InvalidArgumentError(f"dtype must be one of {', '.join(TORCH_DTYPES)}, "
                                   f"got {dtype!r}")
    return TORCH_DTYPES[dtype]


def real_inputs(model: nn.Module, inputs: InputSpec, batch: int, dtype: str = "fp32",
                device: torch.device | str = "cpu") -> ModelInputs:
    """The forward arguments at ``batch`` as real tensors on ``device``, floats cast to dtype."""
    want = _torch_dtype(dtype)
    resolved = resolve_inputs(model, inputs, batch, want)

    def conv(t: torch.Tensor) -> torch.Tensor:
        if t.device.type == "meta":
            raise InvalidArgumentError(
                "this framework runs the model, so inputs must be real tensors, got a meta "
                "tensor; pass real inputs (or a callable batch -> inputs)")
        t = t.to(device)
        return t.to(want) if t.is_floating_point() else t

    return resolved.map(conv)


@contextlib.contextmanager
def eval_no_grad(model: nn.Module) -> Iterator[None]:
    """Eval mode and no_grad for the duration; restores each module's training flag."""
    was_training = [m.training for m in model.modules()]
    model.eval()
    try:
        with torch.no_grad():
            yield
    finally:
        for m, flag in zip(model.modules(), was_training):
            m.training = flag


def model_in_dtype(model: nn.Module, dtype: str, device: torch.device | str = "cpu"
                   ) -> nn.Module:
    """``model`` itself for fp32 on its own device, else a converted deep copy."""
    want = _torch_dtype(dtype)
    params = list(model.parameters()) + list(model.buffers())
    if any(p.device.type == "meta" for p in params):
        raise InvalidArgumentError(
            f"{type(model).__name__} has parameters on the meta device; this framework builds "
            "and runs the model, so build it with real weights")
    same_dtype = all(p.dtype == want for p in params if p.is_floating_point())
    same_device = all(p.device == torch.device(device) for p in params)
    if same_dtype and same_device:
        return model
    out = copy.deepcopy(model).to(device)
    return out.to(want) if not same_dtype else out


class PositionalModule(nn.Module):
    """``model`` behind a forward of positional tensors only, returning a flat tuple of tensors.

    The child is registered as ``model``, so exporter scopes gain one leading component
    ("model"), which :func:`module_path_from_scope` strips with ``strip_prefix``.
    """

    PREFIX = "model"

    def __init__(self, model: nn.Module, inputs: ModelInputs) -> None:
        super().__init__()
        self.model = model
        flat, self._spec = pytree.tree_flatten((inputs.args, inputs.kwargs))
        self._tensor_pos = [i for i, v in enumerate(flat) if isinstance(v, torch.Tensor)]
        self._template = [None if isinstance(v, torch.Tensor) else v for v in flat]
        self.example = tuple(flat[i] for i in self._tensor_pos)

    def forward(self, *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
        flat = list(self._template)
        for pos, t in zip(self._tensor_pos, tensors):
            flat[pos] = t
        args, kwargs = pytree.tree_unflatten(flat, self._spec)
        out = self.model(*args, **kwargs)
        return tuple(t for t in pytree.tree_leaves(_plain(out)) if isinstance(t, torch.Tensor))


def _plain(out: Any) -> Any:
    """Hugging Face ModelOutput and other Mapping outputs as plain dicts (pytree-friendly)."""
    if isinstance(out, dict):  # ModelOutput is an OrderedDict
        return {k: _plain(v) for k, v in out.items()}
    if isinstance(out, (tuple, list)):
        return tuple(_plain(v) for v in out)
    return out


def module_names(model: nn.Module) -> frozenset[str]:
    return frozenset(n for n, _ in model.named_modules(remove_duplicate=False))


def module_path_from_scope(components: Sequence[str], names: frozenset[str],
                           strip_prefix: str = "") -> str:
    """The deepest module path of the model that the scope components spell.

    Exporters write each scope component either relative to the previous one ("conv1" under
    "layer1.0") or relative to an ancestor ("layer1.0" under "layer1"; "model.0" under the
    root). Each component is tried as a child of the current path, of its ancestors, and on its
    own; the walk stops at the first component that names no module (an op name such as
    "Conv"). ``strip_prefix`` is the name of a wrapper's child holding the model
    (:class:`PositionalModule`): paths are resolved with it and returned without it.
    """
    comps = [c for c in components if c]
    full = _prefixed(names, strip_prefix) if strip_prefix else names
    path = ""
    for comp in comps:
        found = None
        base = path
        while True:
            cand = f"{base}.{comp}" if base else comp
            if cand in full:
                found = cand
                break
            if not base:
                break
            base = base.rpartition(".")[0]
        if found is None:
            break
        path = found
    if strip_prefix:
        if path == strip_prefix:
            return ""
        if path.startswith(strip_prefix + "."):
            return path[len(strip_prefix) + 1:]
    return path


@functools.lru_cache(maxsize=8)
def _prefixed(names: frozenset[str], prefix: str) -> frozenset[str]:
    return frozenset({prefix} | {f"{prefix}.{n}" for n in names if n})


def input_signature(inputs: ModelInputs) -> tuple[Any, ...]:
    flat, spec = pytree.tree_flatten((inputs.args, inputs.kwargs))
    sig = tuple((tuple(v.shape), str(v.dtype)) if isinstance(v, torch.Tensor) else repr(v)
                for v in flat)
    return (str(spec), sig)


@dataclass
class _Entry(Generic[T]):
    ref: weakref.ref[nn.Module]
    value: T


# buffers up to this many elements enter a model's structure key by value (masks, position
# ids, index tables: constants an exporter may fold); larger ones, and weights, by shape only
_KEYED_BUFFER_NUMEL = 65536
_PLAIN = (type(None), bool, int, float, complex, str, bytes, torch.dtype, torch.device)


def _token(value: Any, depth: int = 0) -> str:
    """A stable text for a module attribute that may steer its forward, or a per-object one
    (``id``) where none is known (or reading it fails), so that such a module never shares a
    key."""
    try:
        return _stable_token(value, depth)
    except Exception:
        return f"id:{id(value)}"


def _stable_token(value: Any, depth: int) -> str:
    if isinstance(value, _PLAIN):
        return repr(value)
    if isinstance(value, torch.Tensor):
        # a subclass (a fake tensor a trace left in a module's cache) by shape alone
        plain = type(value) in (torch.Tensor, nn.Parameter)
        small = (plain and value.device.type != "meta"
                 and value.numel() <= _KEYED_BUFFER_NUMEL)
        digest = hashlib.sha256(value.detach().cpu().contiguous().view(-1).view(torch.uint8)
                                .numpy().tobytes()).hexdigest() if small else ""
        return f"{type(value).__name__}{tuple(value.shape)}{value.dtype}{digest}"
    if depth < 3 and isinstance(value, (tuple, list, frozenset, set)):
        items = sorted(_token(v, depth + 1) for v in value) if isinstance(
            value, (set, frozenset)) else [_token(v, depth + 1) for v in value]
        return f"{type(value).__name__}({','.join(items)})"
    if depth < 3 and isinstance(value, dict):
        return "{" + ",".join(f"{k!r}:{_token(v, depth + 1)}" for k, v in value.items()) + "}"
    to_json = getattr(value, "to_json_string", None)  # a Hugging Face config
    if callable(to_json):
        return str(to_json())
    if isinstance(value, functools.partial):
        return f"partial({_token(value.func, depth + 1)},{_token(value.args, depth + 1)}," \
               f"{_token(value.keywords, depth + 1)})"
    code = getattr(value, "__code__", None)
    if code is not None:  # a Python function or lambda: its code and what it closed over
        cells = tuple(c.cell_contents for c in (getattr(value, "__closure__", None) or ()))
        defaults = getattr(value, "__defaults__", None) or ()
        consts = tuple(c for c in code.co_consts if isinstance(c, _PLAIN))
        return f"fn:{code.co_filename}:{code.co_firstlineno}:{code.co_code.hex()}:" \
               f"{consts!r}:{code.co_names}:{_token(cells, depth + 1)}:" \
               f"{_token(defaults, depth + 1)}"
    qualname = getattr(value, "__qualname__", None)
    if qualname is not None and callable(value):  # a builtin or a class
        return f"{getattr(value, '__module__', '')}.{qualname}"
    return f"id:{id(value)}"


def structure_key(model: nn.Module) -> str:
    """A digest of what a framework's lowering of ``model`` depends on besides its inputs: every
    submodule's name, class, mode and public attributes (numbers, strings, functions by their
    code, a Hugging Face config by its JSON; an object of unknown kind by its identity, so that
    module shares nothing), every parameter's and buffer's name, shape, dtype and device type,
    and small buffers' values. Weights' values do not enter: two instances of one architecture
    share a key (a model whose Python control flow branches on its weights' values would be
    lowered once for both)."""
    h = hashlib.sha256()
    for name, m in model.named_modules():
        cls = type(m)
        attrs = ",".join(f"{k}={_token(v)}" for k, v in sorted(vars(m).items())
                         if not k.startswith("_"))
        h.update(f"m|{name}|{cls.__module__}.{cls.__qualname__}|{m.extra_repr()}|{attrs}\n"
                 .encode())
    tensors = itertools.chain((("p", n, t) for n, t in model.named_parameters()),
                              (("b", n, t) for n, t in model.named_buffers()))
    for kind, name, tensor in tensors:
        h.update(f"{kind}|{name}|{tuple(tensor.shape)}|{tensor.dtype}|{tensor.device.type}\n"
                 .encode())
        if kind == "b":
            h.update(_token(tensor).encode())
    return h.hexdigest()


class ArtifactCache(Generic[T]):
    """A small LRU of built artifacts keyed by (model identity, batch, dtype, device, ...).

    Identity is ``id(model)`` checked against a weak reference, so a new model that reuses a
    freed id misses. Weights changed in place after a build are not detected. With
    ``by_structure``, a miss on identity may be served by an artifact built for another model
    of the same :func:`structure_key` (a second instance of one architecture, a NAS candidate
    seen before): only for what does not depend on weights (a lowered Program), never for an
    artifact that will run.
    """

    def __init__(self, maxsize: int = 4) -> None:
        self.maxsize = maxsize
        self._data: OrderedDict[tuple[Any, ...], _Entry[T]] = OrderedDict()
        self._shared: OrderedDict[tuple[Any, ...], T] = OrderedDict()

    def get(self, model: nn.Module, key: tuple[Any, ...], by_structure: bool = False
            ) -> T | None:
        """The artifact built for ``model`` (or, with ``by_structure``, for a model of its
        structure) under ``key``; None if there is none."""
        full = (id(model), *key)
        hit = self._data.get(full)
        if hit is not None and hit.ref() is model:
            self._data.move_to_end(full)
            return hit.value
        shared = (structure_key(model), *key)
        if by_structure and shared in self._shared:
            self._shared.move_to_end(shared)
            return self._shared[shared]
        return None

    def get_or_build(self, model: nn.Module, key: tuple[Any, ...], build: Callable[[], T],
                     by_structure: bool = False) -> T:
        hit = self.get(model, key, by_structure)
        if hit is not None:
            return hit
        full, shared = (id(model), *key), (structure_key(model), *key)
        value = build()
        self._data[full] = _Entry(weakref.ref(model), value)
        self._data.move_to_end(full)
        self._shared[shared] = value
        for lru in (self._data, self._shared):
            while len(lru) > self.maxsize:
                lru.popitem(last=False)
        return value

    def clear(self) -> None:
        self._data.clear()
        self._shared.clear()

    def __len__(self) -> int:
        return len(self._data)


_KERNEL_FIELDS = set(Kernel.__dataclass_fields__)


def make_kernel(op_class: str, macs: int, bytes_read: int, bytes_written: int,
                module_path: str, members: tuple[str, ...], dtype: str = "float32",
                variant: str = "", bytes_weights: int = 0,
                reads: tuple[tuple[int, int], ...] = (),
                writes: tuple[tuple[int, int], ...] = (), weight_reads: int = 1,
                weights_per_image: bool = False) -> Kernel:
    """A Kernel; ``bytes_weights``, the operand identities ``reads``/``writes`` ((storage
    id, bytes) pairs) and ``weight_reads`` of a kernel that reads its weights once per image
    (``weights_per_image``) are kept where this version of Kernel has the fields."""
    kw: dict[str, Any] = {}
    if weights_per_image and "weights_per_image" in _KERNEL_FIELDS:
        kw["weight_reads"], kw["weights_per_image"] = max(1, int(weight_reads)), True
    if "bytes_weights" in _KERNEL_FIELDS:
        kw["bytes_weights"] = int(bytes_weights)
    if (reads or writes) and "reads" in _KERNEL_FIELDS:
        kw["reads"], kw["writes"] = tuple(reads), tuple(writes)
    return Kernel(op_class, int(macs), int(bytes_read), int(bytes_written), module_path,
                  members, dtype, variant, **kw)
