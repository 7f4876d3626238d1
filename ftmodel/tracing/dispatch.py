"""The recorder: one forward pass under a TorchDispatchMode on fake tensors.

``trace(model, inputs, batch)`` replaces every parameter, buffer and input by a FakeTensor of the
same shape, dtype and device (no storage, no compute), calls the model through
``torch.func.functional_call`` (the model object is not modified: attributes a forward sets or
caches on its modules during the trace are put back afterwards, and a model built on the meta
device works with ordinary CPU inputs), and records one :class:`OpRecord` per aten op.
Module paths come from global forward hooks active only while tracing. No TorchFunctionMode is
used: it would make ``has_torch_function`` true and switch off eager fast paths (e.g.
nn.MultiheadAttention's), so the trace would no longer match what eager runs. If the model
cannot run on fake tensors (data-dependent control flow, ops without a meta kernel), the pass is
repeated on real tensors at the requested batch and the Trace carries a warning saying so. See
``records.py`` for counting semantics and ``recorder.py`` for the recorder itself.
"""

from __future__ import annotations

import _lsprof
import contextlib
import os
import sys
import sysconfig
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode, unset_fake_temporarily

from ftmodel.errors import FtmodelError, TraceError
from ftmodel.tracing.decode import DecodeInputs
from ftmodel.tracing.inputs import (InputSpec, ModelInputs, as_inputs, batch_of, check_batch,
                                    resolve_inputs)
from ftmodel.tracing.records import Trace
from ftmodel.tracing.recorder import DispatchRecorder, Recorder

__all__ = ["trace", "Recorder", "to_meta"]


def _module_names(model: nn.Module) -> dict[int, str]:
    names: dict[int, str] = {}
    for name, mod in model.named_modules(remove_duplicate=False):
        names.setdefault(id(mod), name)
    return names


def _target_device(inputs: ModelInputs, model: nn.Module) -> torch.device:
    for t in inputs.tensors():
        if t.device.type != "meta":
            return t.device
    for p in model.parameters():
        if p.device.type != "meta":
            return p.device
    return torch.device("cpu")


def _fake_like(t: torch.Tensor, device: torch.device, dtype: torch.dtype | None = None
               ) -> torch.Tensor:
    """A tensor with t's metadata on ``device``; under FakeTensorMode it has no storage.

    ``dtype`` replaces floating-point dtypes only (integer token ids stay integers).
    """
    new_dtype = dtype if dtype is not None and t.is_floating_point() else t.dtype
    return torch.empty_strided(tuple(t.shape), tuple(t.stride()), dtype=new_dtype, device=device)


@contextlib.contextmanager
def _eval_mode(model: nn.Module) -> Iterator[None]:
    was_training = [m.training for m in model.modules()]
    model.eval()
    try:
        yield
    finally:
        for m, flag in zip(model.modules(), was_training):
            m.training = flag


@contextlib.contextmanager
def _attributes_kept(model: nn.Module) -> Iterator[None]:
    """Every module of ``model`` leaves the trace with the attributes it entered it with.

    A forward may cache what it computes on its module: timm's LeViT keeps its attention biases
    in a dict attribute (``attention_bias_cache``), rotary embeddings keep cos/sin tables. Made
    during a trace, such a cache holds a FakeTensor, and the model's next real call computed on
    fake tensors (a LeViT-128S returned a FakeTensor, 40x slower). Each module's attributes are
    put back as they were (added ones removed), and the contents of those that are dicts, lists
    or sets, one level deep; what a forward mutates deeper inside other objects is not undone.
    """
    saved = []
    for m in model.modules():
        attrs = dict(m.__dict__)
        contents = {k: (v.copy() if isinstance(v, (dict, set)) else list(v))
                    for k, v in attrs.items() if isinstance(v, (dict, list, set))}
        saved.append((m, attrs, contents))
    try:
        yield
    finally:
        for m, attrs, contents in saved:
            for k in [k for k in m.__dict__ if k not in attrs]:
                del m.__dict__[k]
            m.__dict__.update(attrs)
            for k, kept in contents.items():
                v = attrs[k]
                if isinstance(v, list):
                    v[:] = kept
                else:
                    v.clear()
                    v.update(kept)


# Python frames of files under these prefixes are framework code (priced per module call and
# per op), not the model's own glue: torch's package and ftmodel's own (torchvision,
# transformers and user code are counted). The packages' directories, not any path with a
# "torch" or "ftmodel" component: matched as such, a model in a checkout named ftmodel (or the
# calibration's synthetic networks, run from one) had none of its Python calls counted.
_FRAMEWORK_FILES = (os.path.dirname(os.path.abspath(torch.__file__)) + os.sep,
                    os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep,
                    "<frozen ")
# the standard library's weak containers: their callbacks run when an object dies, inside
# whatever frame drops the last reference (in a trace, a fake tensor's memo entry), not as calls
# of the model; counted, a network's Python calls depended on what its process had traced before
# (one such callback inside the first trace of a transformer block, none in later ones)
_WEAKREF_FILES = ("weakref.py", "_weakrefset.py")
_STDLIB = sysconfig.get_paths()["stdlib"]
_FRAMEWORK, _LIBRARY, _MODEL = 0, 1, 2


def _code_kind(filename: str) -> int:
    """framework (torch, ftmodel, the standard library's weak containers), library (the rest of
    the standard library, generated code) or model."""
    if filename.startswith(_FRAMEWORK_FILES):
        return _FRAMEWORK
    if filename.startswith(_STDLIB) and os.path.basename(filename) in _WEAKREF_FILES:
        return _FRAMEWORK
    if filename.startswith("<") or (filename.startswith(_STDLIB)
                                    and "-packages" not in filename):
        return _LIBRARY
    return _MODEL


@contextlib.contextmanager
def _count_python_calls(rec: Recorder) -> Iterator[None]:
    """Count Python function calls made by the model's own code (rec.py_calls).

    A call counts when its caller is model code (not torch, ftmodel or the standard library)
    and its callee is not framework code: the model's helpers and the library functions it calls
    directly. A ``forward`` entered through ``nn.Module.__call__`` (a torch frame) is a module
    call, not counted here; library code that torch's own internals run is not counted either.
    The recorder switches the counter off while an aten op runs on plain or fake tensors (see
    ``recorder.DispatchRecorder``): nothing the model wrote runs in there, and counting every
    call of the fake-tensor machinery would double a segment's tracing time.

    The counter is a profile function (``sys.setprofile``), so it stands in for a profiler that
    is running (cProfile: the trace itself is not profiled) and gives it back afterwards.
    """
    kinds: dict[str, int] = {}

    def kind(code: Any) -> int:
        k = kinds.get(code.co_filename)
        if k is None:
            k = kinds[code.co_filename] = _code_kind(code.co_filename)
        return k

    def profile(frame: Any, event: str, arg: Any) -> None:
        if event == "c_call":  # the model's code calling into C: a new call (OpRecord.inner)
            if kind(frame.f_code) == _MODEL:
                rec.py_events += 1
        elif event == "call" and kind(frame.f_code) != _FRAMEWORK:
            caller = frame.f_back
            if caller is not None and kind(caller.f_code) == _MODEL:
                rec.py_calls += 1

    previous = sys.getprofile()
    sys.setprofile(profile)
    rec.py_counter = profile
    try:
        yield
    finally:
        rec.py_counter = None
        if isinstance(previous, _lsprof.Profiler):  # cProfile hooks in from C: re-enable it
            previous.enable()
        else:
            sys.setprofile(previous)


def _run(model: nn.Module, inputs: ModelInputs, rec: Recorder,
         state: dict[str, torch.Tensor] | None) -> None:
    with rec.module_hooks(), DispatchRecorder(rec), _count_python_calls(rec):
        if state is None:
            model(*inputs.args, **inputs.kwargs)
        else:
            torch.func.functional_call(model, state, inputs.args, inputs.kwargs, strict=False)


def _trace_fake(model: nn.Module, inputs: InputSpec, batch: int | None,
                dtype: torch.dtype | None) -> tuple[Recorder, int]:
    made_here = isinstance(inputs, DecodeInputs) or (callable(inputs)
                                                     and not isinstance(inputs, torch.Tensor))
    real_like = None if made_here else inputs
    # Plain tensor attributes (not registered buffers) are converted on the fly.
    fake_mode = FakeTensorMode(allow_non_fake_inputs=True)
    memo: dict[int, torch.Tensor] = {}  # one fake per real tensor: keeps tied weights tied

    def fake_of(t: torch.Tensor, device: torch.device) -> torch.Tensor:
        key = id(t)
        if key not in memo:
            memo[key] = _fake_like(t, device, dtype).requires_grad_(
                t.requires_grad and t.is_floating_point())
        return memo[key]

    meta_like = to_meta(real_like, {}) if real_like is not None else None
    with fake_mode:
        if real_like is None:  # defaults and callables: factories make fakes directly
            resolved = resolve_inputs(model, inputs, batch, dtype)
            device = _target_device(resolved, model)
            resolved = resolved.map(lambda t: fake_of(t, device))
        else:
            meta_view = resolve_inputs(model, meta_like, batch)
            device = _target_device(as_inputs(real_like), model)
            resolved = meta_view.map(lambda t: fake_of(t, device))
        named = _named_state(model)
        _fake_state(fake_mode, [t for _, t in named], device, dtype, memo)
        state = {n: fake_of(t, device) for n, t in named}
        rec = Recorder(_module_names(model), {id(t) for t in state.values()}, state.values())
        _run(model, resolved, rec, state)
    return rec, batch_of(resolved)


def _fake_state(mode: FakeTensorMode, tensors: list[torch.Tensor], device: torch.device,
                dtype: torch.dtype | None, memo: dict[int, torch.Tensor]) -> None:
    """Fakes of ``tensors`` (parameters, buffers) into ``memo``, made as the fake mode's
    factories make them (a FakeTensor around a meta tensor) without dispatching one factory op
    per tensor; tensors it cannot make are left to the caller's ``fake_of``."""
    fresh = {id(t): t for t in tensors if id(t) not in memo}
    try:
        with unset_fake_temporarily():
            metas = {k: _fake_like(t, _META, dtype) for k, t in fresh.items()}
        for k, t in fresh.items():
            memo[k] = FakeTensor(mode, metas[k], device).requires_grad_(
                t.requires_grad and t.is_floating_point())
    except Exception:  # noqa: BLE001 - a private constructor: the factory path still works
        pass


_META = torch.device("meta")


def _named_state(model: nn.Module) -> list[tuple[str, torch.Tensor]]:
    items: list[tuple[str, torch.Tensor]] = list(model.named_parameters(remove_duplicate=False))
    items += list(model.named_buffers(remove_duplicate=False))
    return items


def to_meta(inputs: Any, memo: dict[int, torch.Tensor]) -> Any:
    """The same structure with every tensor on the meta device (no data copied); a tensor
    passed twice stays one tensor, so identity checks such as ``query is key`` still hold."""
    if isinstance(inputs, torch.Tensor):
        if id(inputs) not in memo:
            memo[id(inputs)] = inputs.to("meta")
        return memo[id(inputs)]
    if isinstance(inputs, (tuple, list)):
        return type(inputs)(to_meta(v, memo) for v in inputs)
    if isinstance(inputs, dict):
        return {k: to_meta(v, memo) for k, v in inputs.items()}
    return inputs


def _trace_real(model: nn.Module, inputs: InputSpec, batch: int | None) -> tuple[Recorder, int]:
    if any(p.device.type == "meta" for p in model.parameters()):
        raise TraceError(
            f"{type(model).__name__} is on the meta device and could not be traced on fake "
            "tensors, so it cannot be run for real either; build it on a real device."
        )
    resolved = resolve_inputs(model, inputs, batch)
    named = _named_state(model)
    rec = Recorder(_module_names(model), {id(t) for _, t in named}, [t for _, t in named])
    _run(model, resolved, rec, None)
    return rec, batch_of(resolved)


def trace(model: nn.Module, inputs: InputSpec = None, batch: int | None = None,
          dtype: torch.dtype | None = None) -> Trace:
    """Record the aten ops of one inference forward pass of ``model`` (eval mode, no grad).

    ``inputs`` is a tensor, tuple, dict or callable ``batch -> inputs`` (see
    :mod:`ftmodel.tracing.inputs`); ``batch`` resizes dim 0 (None keeps the inputs' own batch);
    ``dtype`` casts floating-point parameters and inputs (fake tracing only).
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    if batch is not None:
        check_batch(batch)
    warnings: list[str] = []
    fake = True
    with torch.no_grad(), _eval_mode(model), _attributes_kept(model):
        try:
            rec, used_batch = _trace_fake(model, inputs, batch, dtype)
        except FtmodelError:
            raise
        except Exception as err:  # noqa: BLE001 - any fake-tensor failure triggers the fallback
            rec, used_batch, fake = _fallback(model, inputs, batch, err, warnings)
    return Trace(
        records=tuple(rec.records),
        n_module_calls=sum(rec.module_calls.values()),
        module_calls=dict(rec.module_calls),
        n_py_calls=rec.py_calls,
        batch=used_batch,
        fake=fake,
        warnings=tuple(warnings),
        meta={"model": type(model).__name__},
    )


def _fallback(model: nn.Module, inputs: InputSpec, batch: int | None, err: Exception,
              warnings: list[str]) -> tuple[Recorder, int, bool]:
    reason = f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
    try:
        rec, used = _trace_real(model, inputs, batch)
    except TraceError:
        raise
    except Exception as real_err:
        raise TraceError(
            f"could not trace {type(model).__name__}: on fake tensors ({reason}); "
            f"for real ({type(real_err).__name__}: {real_err})"
        ) from real_err
    warnings.append(
        f"{type(model).__name__} could not run on fake tensors ({reason[:200]}); it was traced "
        f"for real at batch {used}, which ran its compute and used its weights' memory."
    )
    return rec, used, False
