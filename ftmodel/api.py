"""The public API: predict_latency, crossover_batch, trace, load_profile.

``predict_latency`` traces the model on fake tensors at each batch, lowers the trace to what the
framework launches, prices host events with the host profile and kernels with the device profile,
and runs the host/device timelines. The crossover batch comes from the same predicted curves
over continuous batch: per-kernel work is affine in batch (traced at batch 2 and 3), host
overhead is constant in batch. Frameworks that build an artifact per batch (TorchScript, ONNX
Runtime, inductor) take it from the first requested batch's Program instead, each kernel's MACs
and non-weight bytes proportional to batch (:func:`ftmodel.batch_scaling.kernel_at_batch`),
not two more builds.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
import os
from typing import Any, Union, cast, overload

import numpy as np
import torch
from torch import nn

from ftmodel.current_speed import at_current_speed, check_speed, speed_record
from ftmodel.deprecation import renamed
from ftmodel.errors import FrameworkUnsupported, InvalidArgumentError
from ftmodel.estimate.allocator import mapped_page_faults, page_faults, process_start
from ftmodel.estimate.cache import OperandEvents, cold_fractions
from ftmodel.estimate.guards import guard_seconds
from ftmodel.estimate.kernels import DeviceModel, blend_hot_cold
from ftmodel.estimate.launches import expand_launches
from ftmodel.estimate.timeline import (Timeline, crossover, device_scales, host_costs_s,
                                       kernel_host_costs_s, run_timeline)
from ftmodel.frameworks.base import get_framework
from ftmodel.batch_scaling import kernel_at_batch, kernel_between_batches
from ftmodel.program import Kernel, Program, entry_launches
from ftmodel.hardware.profile import HardwareProfile
from ftmodel.plain_objects import maker
from ftmodel.prediction import KernelArrays, LayerCost, Prediction
from ftmodel.hardware.registry import load_profile
from ftmodel.host_model import HEAPS, HostSpec, framework_host, heap_model
from ftmodel.tracing.decode import DecodeInputs
from ftmodel.tracing.dispatch import trace
from ftmodel.tracing.inputs import InputSpec, check_batch
from ftmodel.tracing.records import Trace
from ftmodel.tracing.variants import backend_threads

__all__ = ["Prediction", "LayerCost", "KernelArrays", "predict_latency", "crossover_batch",
           "trace", "load_profile", "resolve_profile", "DTYPES", "Predictor", "DeviceSpec",
           "HostSpec"]

# What names a device: a profile name ("a100", "cpu", "auto"), a profile file, or a profile.
DeviceSpec = Union[str, os.PathLike[str], HardwareProfile]
DTYPES = {"fp32": torch.float32, "tf32": torch.float32, "fp16": torch.float16,
          "bf16": torch.bfloat16}
_DTYPE_ALIASES = {"float32": "fp32", "float": "fp32", "float16": "fp16", "half": "fp16",
                  "bfloat16": "bf16"}


def _canonical_dtype(dtype: str) -> str:
    key = _DTYPE_ALIASES.get(str(dtype).lower(), str(dtype).lower())
    if key not in DTYPES:
        raise InvalidArgumentError(f"dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
    return key


def resolve_profile(device: DeviceSpec) -> HardwareProfile:
    """The profile ``device`` names: "auto" (the local GPU via NVML, else this machine's
    calibrated CPU profile), a built-in name, a profile path, or a HardwareProfile itself."""
    if isinstance(device, str) and device.strip().lower() == "auto":
        from ftmodel.hardware.nvml import local_gpu_profile_name
        name = local_gpu_profile_name()
        return load_profile(name if name is not None else "local-cpu")
    return load_profile(device)


def _layers(program: Program, tl: Timeline) -> tuple[LayerCost, ...]:
    """Per module path, in order of first appearance: kernels, MACs, and host and device
    seconds, each summed in kernel order from 0.0 (``0.0 + o_1 + o_2 ...``)."""
    kernels = program.kernels
    paths = [k.module_path for k in kernels]
    host, dev = tl.host_s.tolist(), tl.device_s.tolist()
    if len(set(paths)) == len(paths):  # one kernel per path (the common case): no sums
        rows = [(p, 1, k.macs, 0.0 + o, 0.0 + d) for p, k, o, d in zip(paths, kernels, host, dev)]
    else:
        acc: dict[str, list[Any]] = {}
        for p, k, o, d in zip(paths, kernels, host, dev):
            row = acc.get(p)
            if row is None:
                acc[p] = [p, 1, k.macs, 0.0 + o, 0.0 + d]
            else:
                row[1] += 1
                row[2] += k.macs
                row[3] += o
                row[4] += d
        rows = acc.values()  # type: ignore[assignment]
    return tuple([_make_layer({"module_path": p, "n_launches": int(n), "macs": int(macs),
                               "host_s": o, "device_s": d}) for p, n, macs, o, d in rows])


_make_layer = maker(LayerCost)


class Predictor:
    """Predictions for one framework and profile; reuses device curves across calls."""

    def __init__(self, framework: str, device: DeviceSpec = "auto", *,
                 host: HostSpec | None = None, dtype: str = "fp32", heap: str = "plain",
                 gpu: DeviceSpec | None = None, speed: str = "profile") -> None:
        device = renamed("device", device, "auto", "gpu", gpu)
        if heap not in HEAPS:
            raise InvalidArgumentError(
                f"heap must be one of {', '.join(map(repr, HEAPS))}, got {heap!r}: 'plain' "
                "predicts a process with glibc's default malloc, 'kept' one whose freed memory "
                "stays mapped (jemalloc, tcmalloc, ftmodel.measure.keep_heap)")
        self.framework = get_framework(framework)
        self.framework.check_installed()
        self.profile = resolve_profile(device)
        check_speed(speed, self.profile)
        if speed == "now":
            self.profile = at_current_speed(self.profile)
        self.speed = speed_record(self.profile)
        self.dtype = _canonical_dtype(dtype)
        self.warnings: list[str] = []
        if self.framework.needs_gpu and self.profile.device.type == "cpu":
            raise InvalidArgumentError(
                f"framework {self.framework.name!r} needs a GPU profile, but {self.profile.name!r}"
                " is a CPU profile; pass device= a built-in GPU name (see `ftmodel profiles`)")
        if self.dtype not in self.profile.device.dtypes:
            raise InvalidArgumentError(
                f"dtype {self.dtype!r} is not supported by profile {self.profile.name!r} "
                f"(supports: {', '.join(self.profile.device.dtypes)})")
        self.fw_host, host_prof = framework_host(self.profile, host, self.framework,
                                                  self.warnings)
        self.host_name = host_prof.name
        self.host_threads = host_prof.threads
        self.heap, self.page_fault_s = heap_model(heap, self.profile, host_prof,
                                                   self.framework, self.warnings)
        self.malloc = process_start(host_prof.mmap_threshold_bytes)  # where the heap starts
        self.device_model = DeviceModel(self.profile.device, self.dtype,
                                        self.framework.host_events_from or self.framework.name)
        missing = self.framework.missing_curves(self.profile.device)
        if missing:
            self.warnings.append(
                f"device profile {self.profile.name!r} was calibrated before {self.framework.name}"
                f"'s curves {', '.join(missing)} existed: those kernels are priced on the shared "
                f"curves, which miss their per-call cost; `ftmodel calibrate --device cpu "
                f"--frameworks {self.framework.name} --update --out <profile>` adds them")

    @property
    def threads(self) -> int | None:
        """The intra-op thread count the prediction is for: its CPU host's, as calibrated (the
        convolution backends eager selects depend on it; :func:`ftmodel.tracing.variants.
        backend_threads`); None on a GPU, where the calling process's count is used."""
        return self.host_threads if self.profile.device.type == "cpu" else None

    def trace(self, model: nn.Module, inputs: InputSpec, batch: int) -> Trace:
        with backend_threads(self.threads):
            return trace(model, inputs, batch, dtype=DTYPES[self.dtype])

    def lower(self, model: nn.Module, inputs: InputSpec, batch: int, trace: Trace) -> Program:
        """The Program the framework runs for ``model`` at ``batch`` (``trace`` is its Trace):
        counted from the framework's own artifact where it has one, lowered for this profile's
        device (TorchScript's GPU fusion groups included), with the device's helper kernels."""
        if isinstance(inputs, DecodeInputs) and self.framework.exports_graph:
            raise FrameworkUnsupported(
                self.framework.name, "decode step with a KV cache", "",
                "its exporter would have to take a transformers Cache object as an input; "
                "predict decode steps with eager, cudagraphs, inductor or inductor-cudagraphs")
        with backend_threads(self.threads):
            program = self.framework.program(model, inputs, batch, trace,
                                             device=self.profile.device, dtype=self.dtype)
        return self.with_helpers(program)

    def with_helpers(self, program: Program) -> Program:
        """``program`` (lowered for this device) with the helper kernels cuDNN/cuBLAS launch
        below the aten level on this device."""
        return expand_launches(program, self.profile.device, self.framework.name)

    def hot_cold_times_s(self, kernels: Sequence[Kernel], warnings: list[str] | None = None
                         ) -> tuple[np.ndarray, np.ndarray]:
        """(hot, cold) device seconds of each kernel from the profile's curves: a pure function
        of each kernel (module path and operand ids aside), so it may be cached per kernel."""
        return self.device_model.hot_cold_times_s(kernels, warnings)

    def device_times_s(self, kernels: Sequence[Kernel], hot: np.ndarray, cold: np.ndarray,
                       events: OperandEvents | None = None) -> np.ndarray:
        """Device seconds of each kernel of this sequence, before the timeline's in-model terms.

        Each kernel's ``hot`` and ``cold`` times (:meth:`hot_cold_times_s`) are blended by the
        share of its operands that is cold, which depends on the whole sequence
        (:func:`ftmodel.estimate.cache.cold_fractions`; ``events``: the sequence's
        :func:`~ftmodel.estimate.cache.operand_events`, if already known): pass the program's
        full kernel sequence, not a part of it.
        """
        if not self.device_model.has_cold_data:
            return hot
        frac = cold_fractions(kernels, self.device_model.cache, events)
        return blend_hot_cold(hot, cold, frac)

    def kernel_arrays(self, kernels: Sequence[Kernel]) -> KernelArrays:
        """The per-kernel stage of pricing a program: each kernel's device seconds, own host
        seconds, bytes moved and whether Python launched it, with the warnings pricing raised.
        ``kernels``: the program's whole kernel sequence (cold operands depend on it)."""
        warnings: list[str] = []
        hot, cold = self.hot_cold_times_s(kernels, warnings)
        return KernelArrays(
            self.device_times_s(kernels, hot, cold), kernel_host_costs_s(kernels, self.fw_host),
            np.array([k.bytes_total for k in kernels], dtype=np.float64),
            entry_launches(kernels), tuple(warnings))

    def timeline(self, program: Program, arrays: KernelArrays, faults: np.ndarray,
                 warnings: list[str]) -> Timeline:
        """The host and device timelines of ``program`` from its :meth:`kernel_arrays` and
        :meth:`page_faults`; warnings (unpriced host events, then ``arrays``') are appended to
        ``warnings``."""
        dev = self.profile.device
        host_s = host_costs_s(program, self.fw_host, warnings, arrays.own_host_s)
        warnings.extend(arrays.warnings)
        device_s = arrays.device_s
        im = self.fw_host.in_model
        if im:
            # the in-model cost per kernel is Python's (glue, arguments, module machinery): a
            # kernel C++ launched inside the same call (Kernel.inner) does not pay it
            host_s = (host_s * im.get("host_scale", 1.0)
                      + im.get("per_kernel_s", 0.0) * arrays.entry)
            device_s = (device_s * device_scales(program.kernels, im)
                        + arrays.bytes_total * im.get("per_byte_s", 0.0))
        if self.page_fault_s > 0.0:
            host_s = host_s + faults * self.page_fault_s
        # dynamo's guards (inductor): a cost of the call, priced at the bytes it touches
        per_call_s = self.fw_host.per_call_s + guard_seconds(
            program.host_events, program.kernels, self.fw_host.guards)
        return run_timeline(host_s, device_s, execution=dev.execution, per_call_s=per_call_s,
                            launch_latency_s=dev.launch_latency_s, sync_s=dev.sync_s)

    def program_timeline(self, program: Program, warnings: list[str] | None = None
                         ) -> Timeline:
        """:meth:`timeline` of ``program`` with its kernel arrays and page faults computed."""
        return self.timeline(program, self.kernel_arrays(program.kernels),
                             self.page_faults(program), [] if warnings is None else warnings)

    def page_faults(self, program: Program) -> np.ndarray:
        """Page faults per kernel of ``program`` in the heap state predicted (zeros when the
        heap is kept): :func:`ftmodel.estimate.allocator.page_faults`, from the thresholds the
        host profile measured after ``import torch``."""
        if self.page_fault_s <= 0.0:
            return np.zeros(len(program.kernels))
        if not self.framework.allocations_known:  # large_allocations_known (_heap_model)
            return mapped_page_faults(program.kernels)
        return page_faults(program.kernels, self.malloc)

    def crossover(self, p1: Program, p2: Program, warnings: list[str], b1: float = 2.0
                  ) -> float | None:
        """The crossover batch from ``p1`` at batch ``b1`` and ``p2`` at ``b1 + 1``."""
        if len(p1.kernels) != len(p2.kernels) or any(
                a.op_class != b.op_class for a, b in zip(p1.kernels, p2.kernels)):
            warnings.append("crossover batch not computed: the kernel sequence changes with "
                            "batch size")
            return None
        overhead = self.program_timeline(p1).overhead_s

        def compute_at(b: float) -> float:
            ks = tuple(kernel_between_batches(k1, k2, b, b1) for k1, k2 in zip(p1.kernels, p2.kernels))
            im = self.fw_host.in_model
            moved = sum(k.bytes_total for k in ks) * im.get("per_byte_s", 0.0)
            hot, cold = self.hot_cold_times_s(ks, [])
            device_s = self.device_times_s(ks, hot, cold)
            return float((device_scales(ks, im) * device_s).sum()) + moved

        return crossover(lambda b: overhead, compute_at)

    def crossover_from(self, program: Callable[[int], Program], first_batch: int,
                       warnings: list[str]) -> float | None:
        """The crossover batch from the framework's programs (``program(b)``): at batch 2 and
        3; for a framework that builds an artifact per batch (an export, a compile), from
        ``first_batch``'s alone (:func:`kernel_at_batch`), not two more builds."""
        if self.framework.builds_per_batch:
            p0 = program(first_batch)
            p1 = replace(p0, kernels=tuple(kernel_at_batch(k, first_batch, first_batch + 1)
                                           for k in p0.kernels))
            return self.crossover(p0, p1, warnings, float(first_batch))
        # batch 2 and 3, not 1 and 2: at batch 1 matmul folds 4-d operands into bmm without the
        # copies it needs from batch 2 on (BERT: 201 kernels at batch 1, 237 after)
        return self.crossover(program(2), program(3), warnings)

    def predict(self, model: nn.Module, batches: Sequence[int], inputs: InputSpec = None
                ) -> list[Prediction]:
        batches = [check_batch(b) for b in batches]
        if not batches:
            return []
        traces: dict[int, Trace] = {}

        programs: dict[int, Program] = {}

        def program(b: int) -> Program:
            if b not in programs:
                traces[b] = self.trace(model, inputs, b)
                programs[b] = self.lower(model, inputs, b, traces[b])
            return programs[b]

        warn_x: list[str] = []
        xover = self.crossover_from(program, batches[0], warn_x)
        preds = [self.prediction(program(b), self.kernel_arrays(program(b).kernels), b, xover,
                                 warn_x) for b in batches]
        if isinstance(inputs, DecodeInputs):
            preds = [replace(p, decode_context=inputs.context) for p in preds]
        return preds

    def prediction(self, program: Program, arrays: KernelArrays, batch: int,
                   crossover_batch: float | None, crossover_warnings: Sequence[str] = ()
                   ) -> Prediction:
        """The Prediction for one lowered ``program`` from its :meth:`kernel_arrays`."""
        warnings = list(self.warnings)
        faults = self.page_faults(program)
        tl = self.timeline(program, arrays, faults, warnings)
        warnings += list(program.warnings) + list(crossover_warnings)
        return Prediction(
            framework=self.framework.name, device=self.profile.name, batch=batch,
            dtype=self.dtype, latency_s=tl.latency_s, overhead_s=tl.overhead_s,
            compute_s=tl.compute_s, closed_form_s=tl.closed_form_s, regime=tl.regime,
            framework_tax=tl.framework_tax, n_launches=program.n_launches, macs=program.macs,
            crossover_batch=crossover_batch, layers=_layers(program, tl),
            warnings=tuple(dict.fromkeys(warnings)),
            extra={"host": self.host_name, "profile_kind": self.profile.kind,
                   "speed": dict(self.speed)},
            heap=self.heap, page_faults=float(faults.sum()),
        )


@overload
def predict_latency(model: nn.Module, framework: str = ..., device: DeviceSpec = ...,
                    batch: int = ..., *, inputs: InputSpec = ..., dtype: str = ...,
                    host: HostSpec | None = ..., heap: str = ...,
                    gpu: DeviceSpec | None = ..., speed: str = ...) -> Prediction: ...


@overload
def predict_latency(model: nn.Module, framework: str = ..., device: DeviceSpec = ...,
                    batch: Sequence[int] = ..., *, inputs: InputSpec = ..., dtype: str = ...,
                    host: HostSpec | None = ..., heap: str = ...,
                    gpu: DeviceSpec | None = ..., speed: str = ...) -> list[Prediction]: ...


def predict_latency(model: nn.Module, framework: str = "eager", device: DeviceSpec = "auto",
                    batch: int | Sequence[int] = 1, *, inputs: InputSpec = None,
                    dtype: str = "fp32", host: HostSpec | None = None, heap: str = "plain",
                    gpu: DeviceSpec | None = None, speed: str = "profile"
                    ) -> Prediction | list[Prediction]:
    """Predict the inference latency of ``model`` (a Prediction, or a list for a list of batches).

    ``device`` is a built-in profile name (``"a100"``, ``"cpu"``: this machine's calibrated
    profile), a calibrated profile path or object, or "auto" (the local GPU via NVML, else this
    machine's calibrated CPU profile); ``gpu=`` is its deprecated spelling. ``host`` overrides
    the host half.
    ``heap`` is the malloc state predicted on a CPU: ``"plain"`` (default: a process with glibc's
    default malloc, which maps large freed blocks afresh and page-faults them in every forward
    pass, simulated from the traced allocations at the profile's calibrated price per page; see
    :mod:`ftmodel.estimate.allocator` for what it cannot see) or ``"kept"`` (freed memory stays
    mapped, as with jemalloc, tcmalloc or :func:`ftmodel.measure.keep_heap`). Eager and
    TorchScript only; other frameworks and GPU predictions are unchanged by it.
    ``speed``: price at the CPU speed the calibration recorded (``"profile"``) or probed now.
    """
    device = renamed("device", device, "auto", "gpu", gpu)
    if not isinstance(model, nn.Module):
        raise InvalidArgumentError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    predictor = Predictor(framework, device, host=host, dtype=dtype, heap=heap, speed=speed)
    if isinstance(batch, (list, tuple, range, np.ndarray)):
        return predictor.predict(model, [int(b) if isinstance(b, np.integer) else b
                                         for b in batch], inputs)
    if isinstance(batch, np.integer):
        batch = int(batch)
    return predictor.predict(model, [cast(int, batch)], inputs)[0]  # checked by check_batch


def crossover_batch(model: nn.Module, framework: str = "eager", device: DeviceSpec = "auto", *,
                    inputs: InputSpec = None, dtype: str = "fp32", host: HostSpec | None = None,
                    gpu: DeviceSpec | None = None) -> float | None:
    """The batch size at which ``model`` turns compute-bound (None: one regime throughout)."""
    device = renamed("device", device, "auto", "gpu", gpu)
    return predict_latency(model, framework, device, 1, inputs=inputs, dtype=dtype,
                           host=host).crossover_batch
