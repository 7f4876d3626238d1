"""The framework registry: what each framework is and how it lowers a model to a Program.

Each framework module exposes ``lower(trace) -> Program`` (:mod:`ftmodel.program`).

Frameworks that compile the model into their own artifact (ONNX Runtime, TorchScript, inductor)
cannot lower from a Trace alone: they also set :attr:`Framework.lower_model`, which receives the
model and its inputs and counts kernels from the artifact (the Trace is passed along for
feasibility checks and cost attribution). :attr:`Framework.runner` runs that same artifact for
live measurement. What depends on the device beyond its type (TorchScript's GPU fuser, chosen by
the GPU's generation) is :attr:`Framework.device_pass`, applied by :meth:`Framework.program`
when it is given the device's profile.

:data:`BUILTIN_FRAMEWORKS` is the one list of the frameworks ftmodel ships, in the order they are
listed and compared; :func:`framework_names` selects from it by device type.
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

from ftmodel.errors import UnknownNameError
from ftmodel.extras import require
from ftmodel.hardware.profile import DeviceProfile
from ftmodel.program import Program
from ftmodel.tracing.records import Trace

__all__ = ["Framework", "FRAMEWORKS", "ALIASES", "BUILTIN_FRAMEWORKS", "get_framework",
           "canonical_framework", "framework_names", "ModelLowering", "ModelRunner",
           "artifact_room", "register"]

# The frameworks ftmodel ships, in the order they are listed and compared. Each registers itself
# when its module (ftmodel.frameworks.<name>, or the one named in _MODULE_OF) is imported.
BUILTIN_FRAMEWORKS: tuple[str, ...] = ("eager", "torchscript", "onnxruntime", "inductor",
                                       "cudagraphs", "onnxruntime-cudagraphs",
                                       "inductor-cudagraphs")
_MODULE_OF = {"onnxruntime-cudagraphs": "cudagraphs", "inductor-cudagraphs": "inductor_cudagraphs"}


class ModelLowering(Protocol):
    """``lower_model(model, inputs, batch, trace, *, device="cpu", dtype="fp32") -> Program``.

    ``inputs`` is the user's InputSpec (resolved to ``batch`` by the lowering), ``device`` the
    profile's device type ("cpu" | "cuda"), ``dtype`` one of ftmodel's dtype names.
    """

    def __call__(self, model: Any, inputs: Any, batch: int, trace: Trace, *,
                 device: str = "cpu", dtype: str = "fp32") -> Program: ...


class ModelRunner(Protocol):
    """``runner(model, inputs, batch, *, device="cpu", dtype="fp32") -> fn``; ``fn()`` runs one
    inference with the very artifact the lowering counted (for live measurement)."""

    def __call__(self, model: Any, inputs: Any, batch: int, *, device: str = "cpu",
                 dtype: str = "fp32") -> Callable[[], object]: ...


@dataclass(frozen=True)
class Framework:
    """A framework as ftmodel models it.

    ``lower`` maps a Trace to a Program. ``lower_model``, when set, is preferred by the
    predictor: it builds the framework's own artifact from the model and counts from it.
    """

    name: str
    lower: Callable[[Trace], Program]
    needs_gpu: bool = False
    description: str = ""
    legacy: bool = False
    host_events_from: str = ""  # host profile entry to read costs from ("" = own name)
    lower_model: ModelLowering | None = None
    runner: ModelRunner | None = None
    # pause between timing two of its runners (ftmodel.measure.measure_interleaved's settle_s):
    # its worker threads spin after a run and would steal the next runner's cores
    settle_s: float = 0.0
    # its CPU Programs' kernels carry operand identities (Kernel.reads/writes) from which
    # ftmodel.estimate.allocator follows the storages glibc's malloc hands out (a plain process)
    allocations_known: bool = False
    # only its storages above glibc's mmap-threshold ceiling are followed (mapped afresh on
    # every call whatever the heap's layout: ftmodel.estimate.allocator.mapped_page_faults)
    large_allocations_known: bool = False
    # optional Python packages it needs, by import name (their extras: ftmodel.extras)
    requires: tuple[str, ...] = ()
    # it lowers by exporting the model to a graph format of its own (TorchScript, ONNX), whose
    # exporter takes tensors only: not a decode step's transformers Cache object
    exports_graph: bool = False
    # its lowering's device-specific step, given the profile of the device it is lowered for
    # (TorchScript's GPU fusion groups, which depend on the GPU's generation)
    device_pass: Callable[[Program, DeviceProfile], Program] | None = None
    # curves a CPU calibration gives it of its own (keys without the "<name>/" prefix) that
    # profiles calibrated before they existed lack (see missing_curves)
    calibrated_curves: tuple[str, ...] = ()

    def missing_curves(self, device: DeviceProfile) -> list[str]:
        """Which of :attr:`calibrated_curves` a CPU profile lacks although it holds curves of
        this framework's own (``<name>/...``): a profile calibrated before those curves
        existed, whose kernels of that kind fall back to the shared curves. Empty for GPU
        profiles and for profiles without any of this framework's curves."""
        own = f"{self.name}/"
        if device.type != "cpu" or not any(k.startswith(own) for k in device.op_classes):
            return []
        return [c for c in self.calibrated_curves if own + c not in device.op_classes]

    @property
    def builds_per_batch(self) -> bool:
        """Whether its Program comes from an artifact of its own built for each batch size (an
        export, a compile: :attr:`lower_model`), so that another batch's Program costs a build."""
        return self.lower_model is not None

    @property
    def runnable(self) -> bool:
        """Whether ftmodel can run this framework to measure it (calibration, validation):
        through its :attr:`runner`, or as the model's own forward when it builds no artifact of
        its own (eager). ``onnxruntime-cudagraphs`` is predicted only."""
        return self.runner is not None or self.lower_model is None

    def check_installed(self) -> None:
        """Raise :class:`~ftmodel.errors.MissingExtraError` naming the ``pip install`` to run
        if a package this framework needs is missing."""
        for module in self.requires:
            require(module, f"the {self.name!r} framework")

    def program(self, model: Any, inputs: Any, batch: int, trace: Trace, *,
                device: str | DeviceProfile, dtype: str) -> Program:
        """The Program this framework runs: counted from its own artifact (``lower_model``)
        where it has one, else lowered from ``trace``; the device's helper kernels not added.

        ``device``: the profile of the device it is lowered for, which also applies the
        framework's :attr:`device_pass`; or only the device type ("cpu" | "cuda"), which
        lowers without it."""
        self.check_installed()
        profile = device if isinstance(device, DeviceProfile) else None
        device_type = profile.type if profile is not None else str(device)
        if self.lower_model is not None:
            program = self.lower_model(model, inputs, batch, trace, device=device_type,
                                       dtype=dtype)
        else:
            program = self.lower(trace)
        if profile is not None and self.device_pass is not None:
            program = self.device_pass(program, profile)
        return program


FRAMEWORKS: dict[str, Framework] = {}
ALIASES = {"pytorch": "eager", "torch": "eager", "ort": "onnxruntime", "torch.compile": "inductor",
           "compile": "inductor", "jit": "torchscript", "ort-cudagraphs": "onnxruntime-cudagraphs",
           "cuda-graphs": "cudagraphs", "cuda_graphs": "cudagraphs",
           "reduce-overhead": "inductor-cudagraphs", "compile-cudagraphs": "inductor-cudagraphs"}


def register(fw: Framework) -> Framework:
    FRAMEWORKS[fw.name] = fw
    return fw


def canonical_framework(name: str) -> str:
    """The canonical name of ``name`` (aliases resolved, case-insensitive) or a clear error."""
    if not isinstance(name, str):
        raise UnknownNameError("framework", repr(name), list(FRAMEWORKS) + list(ALIASES))
    key = name.strip().lower()
    key = ALIASES.get(key, key)
    _load_builtin_frameworks()
    if key in FRAMEWORKS:
        return key
    raise UnknownNameError("framework", name, list(FRAMEWORKS) + list(ALIASES))


def get_framework(name: str) -> Framework:
    return FRAMEWORKS[canonical_framework(name)]


def framework_names(device_type: str | None = None, *, runnable: bool = False
                    ) -> tuple[str, ...]:
    """The built-in frameworks, in :data:`BUILTIN_FRAMEWORKS`' order: those that run on a device
    of ``device_type`` ("cpu": all but the GPU-only ones; "cuda" or None: all), and only those
    ftmodel can run to measure them if ``runnable`` (:attr:`Framework.runnable`)."""
    _load_builtin_frameworks()
    return tuple(name for name in BUILTIN_FRAMEWORKS
                 if not (device_type == "cpu" and FRAMEWORKS[name].needs_gpu)
                 and (FRAMEWORKS[name].runnable or not runnable))


_BUILTIN_LOADED = False


def _load_builtin_frameworks() -> None:
    # A flag, not ``if FRAMEWORKS``: importing one framework module directly (calibration imports
    # eager) registers it without loading the others. The modules import their heavy
    # dependencies (onnx, onnxruntime, torch._inductor) lazily, on first use.
    global _BUILTIN_LOADED
    if _BUILTIN_LOADED:
        return
    _BUILTIN_LOADED = True
    import importlib

    for name in BUILTIN_FRAMEWORKS:
        importlib.import_module(f"ftmodel.frameworks.{_MODULE_OF.get(name, name)}")


@contextlib.contextmanager
def artifact_room(framework: str, n: int) -> Iterator[None]:
    """Let the artifact cache of framework ``framework`` (its module's ``CACHE``, where it keeps
    one) hold at least ``n`` entries while inside, so that work over many models or batches
    reuses what it built instead of building it again."""
    try:
        cache = getattr(importlib.import_module(
            f"ftmodel.frameworks.{_MODULE_OF.get(framework, framework)}"), "CACHE", None)
    except ImportError:
        cache = None
    if cache is None or not hasattr(cache, "maxsize"):
        yield
        return
    old = cache.maxsize
    cache.maxsize = max(old, n)
    try:
        yield
    finally:
        cache.maxsize = old
