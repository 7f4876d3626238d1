"""Helper kernels that libraries launch below the aten level: the device's launch expansion.

Counting semantics
------------------
A Program from ``frameworks.<name>.lower`` holds one Kernel per op that the framework launches.
On a GPU, cuDNN and cuBLAS often launch more than one kernel for one such op: PyTorch 1.12's
``addmm`` copies the bias into the output before the GEMM, cuDNN's implicit-precomputed-GEMM
convolutions run an offsets kernel first and Winograd convolutions add input/output transforms,
and fp16 convolutions on NCHW tensors add layout transposes around tensor-core kernels. The
device profile's ``launches_per_op[framework]`` gives the *expected* number of device kernels
per op, by ``"<op class>:<dtype>"`` or ``"<op class>"`` (e.g. ``{"conv": 2.4, "conv:fp16": 4.3,
"gemm": 2.0}``; fitted from torch.profiler kernel counts, see
``benchmarks/fit_gpu_efficiency.py``). Expected counts are fractional; the ``k``-th op of a class
gets ``round((k+1)·(e−1)) − round(k·(e−1))`` helper kernels, so the total over a model is the
expectation rounded and every op's count is deterministic (the same at every batch size, which
the crossover search relies on).

A helper kernel is a Kernel of class ``aux`` that does no counted work: it costs the device
profile's ``aux`` curve (its kernel floor) on the device and the host profile's ``kernel:aux``
event (one ``cudaLaunchKernel``) on the host. It follows its op's kernel and carries its module
path. Profiles without ``launches_per_op`` (every calibrated CPU profile) leave programs as
they are.

Inductor calls the same aten library kernels as eager for its extern GEMMs and convolutions, so
``inductor`` and ``inductor-cudagraphs`` use eager's and cudagraphs' tables where a profile has
none of their own (:data:`ftmodel.hardware.host_priors.BORROWS_FROM`); their generated kernels
launch no helpers.

What else depends on the device (TorchScript's GPU fusion groups) is the lowering's: a Program
arrives here as the framework runs it on this device (``Framework.program`` given the device
profile).
"""

from __future__ import annotations

import math
from collections import Counter

import numpy as np

from ftmodel.program import Kernel, Program, kernel_events
from ftmodel.hardware.host_priors import BORROWS_FROM, OWN_LAYOUT_CLASSES
from ftmodel.hardware.profile import DeviceProfile

__all__ = ["AUX_CLASS", "dtype_key", "expand_launches", "helper_counts", "helper_table",
           "helpers_of",
           "launches_per_op"]

AUX_CLASS = "aux"
_DTYPE_KEYS = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16", "float64": "fp64"}


def dtype_key(torch_dtype: str) -> str:
    """``"float16"`` -> ``"fp16"`` (the short names profiles use); unknown names pass through."""
    return _DTYPE_KEYS.get(torch_dtype, torch_dtype)


def launches_per_op(table: dict[str, float] | None, op_class: str, dtype: str) -> float:
    """Expected device kernels per op of ``op_class`` in ``dtype`` (short name); 1 if unlisted."""
    if not table:
        return 1.0
    return float(table.get(f"{op_class}:{dtype}", table.get(op_class, 1.0)))


def helper_table(device: DeviceProfile, framework: str) -> dict[str, float]:
    """The expected device kernels per op that ``framework``'s programs get on ``device``
    (:func:`launches_per_op`'s ``table``): its own, or those of the framework it borrows from
    for the classes it does not lay out itself; empty where the device launches no helpers."""
    own = device.launches_per_op.get(framework)
    table = dict(own or device.launches_per_op.get(BORROWS_FROM.get(framework, ""), {}))
    if not own:  # borrowed: not for the classes the framework lays out itself
        table = {k: v for k, v in table.items()
                 if k.split(":")[0] not in OWN_LAYOUT_CLASSES.get(framework, ())}
    return table


def helpers_of(extra_per_op: float, index: int) -> int:
    """Helper kernels of the ``index``-th op (from 0) of a class whose ops launch
    ``extra_per_op`` helpers on average (the module docstring's rounding)."""
    return _round(extra_per_op * (index + 1)) - _round(extra_per_op * index)


def helper_counts(extra_per_op: np.ndarray, index: np.ndarray) -> np.ndarray:
    """:func:`helpers_of` for arrays of ops (``index``: each op's position in its class)."""
    k = index.astype(np.float64)
    counts: np.ndarray = (np.floor(extra_per_op * (k + 1) + 0.5)
                          - np.floor(extra_per_op * k + 0.5)).astype(np.int64)
    return counts


def expand_launches(program: Program, device: DeviceProfile, framework: str) -> Program:
    """``program`` with the device's helper kernels inserted after the ops that launch them."""
    table = helper_table(device, framework)
    if not table or not program.kernels:
        return program
    seen: Counter[str] = Counter()
    out: list[Kernel] = []
    for k in program.kernels:
        out.append(k)
        extra_per_op = launches_per_op(table, k.op_class, dtype_key(k.dtype)) - 1.0
        if extra_per_op <= 0.0:
            continue
        key = f"{k.op_class}:{dtype_key(k.dtype)}"
        i = seen[key]
        seen[key] += 1
        n_extra = helpers_of(extra_per_op, i)
        out.extend(Kernel(AUX_CLASS, 0, 0, 0, k.module_path, k.members, k.dtype, "aux")
                   for _ in range(n_extra))
    if len(out) == len(program.kernels):
        return program
    kernels = tuple(out)
    events = {e: c for e, c in program.host_events.items() if not e.startswith("kernel:")}
    events.update(kernel_events(kernels))
    return Program(program.framework, kernels, events, program.batch, program.warnings)


def _round(x: float) -> int:
    return int(math.floor(x + 0.5))
