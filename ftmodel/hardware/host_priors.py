"""Host costs of torch.compile (inductor) driving a GPU, where no GPU calibration measured them.

A host profile's ``inductor`` entry, when a CPU calibration wrote it, prices inductor's C++
kernels called from its wrapper on the CPU: not the Triton launches it makes for a GPU. For a GPU
profile, inductor's host costs come from the profile's own host half when a calibration on that
CUDA machine wrote it (``ftmodel calibrate --device cuda``), from a host profile's
``inductor@cuda`` / ``inductor-cudagraphs@cuda`` entry where one has it, and otherwise from this
prior, which every prediction using it names in its warnings.

The prior
---------
* **Triton kernels** (every op class inductor generates code for: elementwise, norm, softmax,
  reduction, pool, copy, embedding): :data:`TRITON_LAUNCH_S` each, the cost of one
  ``CachingAutotuner.run`` of an already compiled kernel measured by tritonbench (6.8 µs with 0
  arguments, 9.1 µs with 19; GB200 host, PyTorch/Triton of April 2026): the wrapper line, the
  autotuner preamble, Triton's argument binder and ``cuLaunchKernel``.
* **Extern kernels** (``extern_kernels.mm/addmm/bmm/convolution``, attention): library calls
  made through aten, priced as this host's eager kernels of the same class.
* **Per forward call** :data:`COMPILED_CALL_S`: dynamo's guards, the compiled graph's wrapper
  and its device guard, measured by the same benchmark as the end-to-end time of a one-kernel
  compiled function less that kernel (44.3 µs - 6.8 µs).
* **inductor-cudagraphs** (``mode="reduce-overhead"``): the host's ``cudagraphs`` costs (one
  graph replay, a device gap per kernel node) plus the same per-call guards and wrapper.

Source: meta-pytorch/tritonbench pull request 1017, "Profile inductor launch overhead and add
per-kernel benchmark" (2026-04-14). What is not in the prior: the host's own speed (its figures
come from a GB200's Grace CPU, unscaled), arguments beyond 19 per kernel, and recompilation.
"""

from __future__ import annotations

from ftmodel.hardware.profile import FrameworkHost, HostProfile

__all__ = ["BORROWS_FROM", "COMPILED_CALL_S", "EXTERN_CLASSES", "OWN_LAYOUT_CLASSES",
           "PRIOR_SOURCE", "TRITON_CLASSES", "TRITON_LAUNCH_S", "gpu_host_key",
           "inductor_gpu_host"]

TRITON_LAUNCH_S = 8.0e-6  # between the 0- and 19-argument CachingAutotuner.run figures
COMPILED_CALL_S = 37.5e-6  # end-to-end one-kernel compiled call (44.3 µs) less its kernel
# op classes inductor leaves to libraries (cuBLAS, cuDNN, flash attention) on a GPU
EXTERN_CLASSES = ("gemm", "bmm", "conv", "conv_grouped", "attention")
# op classes inductor generates Triton kernels for on a GPU: each launched by the same wrapper
# line and CachingAutotuner.run, whatever it computes
TRITON_CLASSES = ("elementwise", "norm", "softmax", "reduction", "pool", "copy", "embedding",
                   "other")
PRIOR_SOURCE = ("tritonbench PR 1017 (2026-04-14, GB200 host): 8 µs per Triton launch, 37.5 µs "
                "per compiled call; extern GEMMs and convolutions at this host's eager costs")
# the framework whose library calls (launch helpers) and host costs each compiled framework's
# prior builds on: inductor's extern kernels are eager's aten calls, its CUDA graph cudagraphs'
BORROWS_FROM = {"inductor": "eager", "inductor-cudagraphs": "cudagraphs"}
# op classes whose library helper kernels a compiled framework does not borrow: inductor runs
# convolutions channels-last on a GPU (layout optimisation), so cuDNN needs none of the
# NCHW/NHWC transposes eager's calls add (H200, torch 2.11: one kernel per convolution,
# benchmarks/results/gpu-h200/zoo-run1.csv)
OWN_LAYOUT_CLASSES = {fw: ("conv", "conv_grouped") for fw in BORROWS_FROM}


def gpu_host_key(framework: str) -> str:
    """The host-profile entry a compiled framework's GPU costs are stored under."""
    return f"{framework}@cuda"


def inductor_gpu_host(framework: str, host: HostProfile) -> tuple[FrameworkHost, str] | None:
    """``(costs, warning)`` for ``framework`` ("inductor" | "inductor-cudagraphs") driving a GPU
    from ``host``: its ``<framework>@cuda`` entry if calibrated (no warning), else the prior
    built from :data:`PRIOR_SOURCE` and the host's eager (or cudagraphs) costs. None for other
    frameworks, or when the host lacks the entry the prior builds on."""
    if framework not in BORROWS_FROM:
        return None
    own = host.frameworks.get(gpu_host_key(framework))
    if own is not None:
        return own, ""
    base = host.frameworks.get(BORROWS_FROM[framework])
    if base is None:
        return None
    if framework == "inductor":
        per = {f"kernel:{c}": TRITON_LAUNCH_S for c in TRITON_CLASSES}
        default = base.per_event_s.get("kernel:elementwise", TRITON_LAUNCH_S)
        per.update({f"kernel:{c}": base.per_event_s.get(f"kernel:{c}", default)
                    for c in EXTERN_CLASSES})
        costs = FrameworkHost(per, per_call_s=COMPILED_CALL_S)
    else:
        costs = FrameworkHost(dict(base.per_event_s),
                              per_call_s=base.per_call_s + COMPILED_CALL_S)
    warning = (f"{framework} host costs on a GPU are a prior, not measured on host "
               f"{host.name!r}: {PRIOR_SOURCE}" + ("" if framework == "inductor" else
                                                   f"; graph replay at {host.name!r}'s "
                                                   "cudagraphs costs")
               + f". To measure them, calibrate on a CUDA machine (`ftmodel calibrate "
               f"--device cuda --frameworks {framework}`) and predict with that profile.")
    return costs, warning
