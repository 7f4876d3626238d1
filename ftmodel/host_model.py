"""What the host half of a prediction charges: the per-dispatch costs of a framework on the host
that drives the device, and the heap state its allocations meet (a plain process's page faults
or a heap kept mapped)."""

from __future__ import annotations

import os
from dataclasses import replace
from typing import Union

from ftmodel.errors import ProfileError
from ftmodel.frameworks.base import Framework
from ftmodel.hardware.host_priors import inductor_gpu_host
from ftmodel.hardware.profile import (
    DEVICE_TERMS,
    KIND_SCALES,
    FrameworkHost,
    HardwareProfile,
    HostOnlyProfile,
    HostProfile,
)
from ftmodel.hardware.registry import default_host_warning, is_default_host, load_host_profile

__all__ = ["DEVICE_TERMS", "HEAPS", "HostSpec", "framework_host", "heap_model"]

# What names a host half: a profile name or file, a profile, a host-only profile, or a
# HostProfile itself.
HostSpec = Union[str, os.PathLike[str], HardwareProfile, HostOnlyProfile, HostProfile]

HEAPS = ("plain", "kept")


def framework_host(profile: HardwareProfile, host: HostSpec | None, fw: Framework,
                   warnings: list[str]) -> tuple[FrameworkHost, HostProfile]:
    """The per-dispatch costs ``fw`` pays on the host that drives ``profile``'s device, and
    that host: ``host`` if given, else the profile's own host half (a default host warns). For
    a compiled framework on a GPU without costs measured driving a GPU (``HostProfile.drives``),
    a cited prior (:func:`ftmodel.hardware.host_priors.inductor_gpu_host`).

    A host half taken from another profile keeps its host-side in-model terms (``host_scale``,
    ``per_kernel_s``) and drops its device-side ones (:data:`DEVICE_TERMS`, the scales by kind): those were fitted
    against that calibration's own device curves, not ``profile``'s."""
    host_prof: HostProfile | None
    if host is not None:
        host_prof = load_host_profile(host)
    else:
        host_prof = profile.host
        if host_prof is not None and is_default_host(host_prof):
            warnings.append(default_host_warning(host_prof, profile.name))
    if host_prof is None:
        raise ProfileError(f"profile {profile.name!r} has no host half; pass host= a calibrated "
                           "profile (`ftmodel calibrate --device cpu`)")
    key = fw.host_events_from or fw.name
    own = host is None or (profile.host is not None
                           and replace(host_prof, drives=profile.host.drives) == profile.host)
    # a compiled framework's CPU costs (C++ kernels) do not price its GPU launches (Triton):
    # only costs measured driving a GPU do; otherwise a cited prior
    drove_gpu = host_prof.drives == "cuda" or (
        not host_prof.drives and host is None and not is_default_host(host_prof))
    if profile.device.type != "cpu" and not (drove_gpu and key in host_prof.frameworks):
        prior = inductor_gpu_host(fw.name, host_prof)
        if prior is not None:
            if prior[1]:
                warnings.append(prior[1])
            return prior[0], host_prof
    if key not in host_prof.frameworks:
        raise ProfileError(
            f"host profile {host_prof.name!r} has no costs for framework {fw.name!r} (it has: "
            f"{', '.join(sorted(host_prof.frameworks)) or 'none'}); calibrate it with "
            f"`ftmodel calibrate --frameworks {fw.name}`")
    costs = host_prof.frameworks[key]
    device_side = DEVICE_TERMS + KIND_SCALES
    if not own and any(t in costs.in_model for t in device_side):
        costs = replace(costs, in_model={k: v for k, v in costs.in_model.items()
                                         if k not in device_side})
    return costs, host_prof


def heap_model(heap: str, profile: HardwareProfile, host: HostProfile, fw: Framework,
               warnings: list[str]) -> tuple[str, float]:
    """The heap state a prediction models and its price per freshly mapped page (0: none).

    Only frameworks whose CPU allocations ftmodel follows (``Framework.allocations_known``:
    eager, TorchScript) pay page faults that ftmodel counts: ONNX Runtime keeps its own arena, a
    GPU's activations come from PyTorch's caching allocator, and inductor's wrapper buffers,
    simulated the same way, gave thousands of faults per call where its plain processes
    measured none (EfficientNet-Lite, MobileNet-V3 on the corpus's tuning half; on the Intel
    Xeon VM, where they do fault, the simulation priced the tuning half worse, figures in
    :mod:`ftmodel.estimate.allocator`): only its
    buffers above glibc's mmap ceiling, mapped afresh every call, are counted
    (``Framework.large_allocations_known``), and the prediction says so.
    """
    if heap == "kept" or profile.device.type != "cpu" or fw.name == "onnxruntime":
        return "kept", 0.0
    if host.page_fault_s <= 0.0:
        warnings.append(f"host profile {host.name!r} has no page-fault cost (calibrated before "
                        "ftmodel measured it), so this predicts a process that keeps its heap "
                        "mapped; re-run `ftmodel calibrate` to predict a plain process")
        return "kept", 0.0
    if not fw.allocations_known and fw.large_allocations_known:
        warnings.append(f"{fw.name}'s allocations are simulated only above glibc's 32 MiB mmap "
                        "ceiling (mapped afresh on every call); smaller buffers as with the heap "
                        "kept")
        return "plain", host.page_fault_s
    if not fw.allocations_known:
        warnings.append(f"{fw.name}'s allocations are not simulated: predicted as with the "
                        "heap kept (glibc's page faults not counted)")
        return "kept", 0.0
    return "plain", host.page_fault_s
