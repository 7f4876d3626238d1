"""Host costs of torch.compile (inductor) driving a GPU, where no GPU calibration measured them.

A host profile's ``inductor`` entry, when a CPU calibration wrote it, prices inductor's C++
kernels called from its wrapper on the CPU: not the Triton launches it makes for a GPU. For a GPU
profile, inductor's host costs come from the profile's own host half when a calibration on that
CUDA machine wrote it (``ftmodel calibrate --device cuda``), from a host profile's
``inductor@cuda`` / ``inductor-cudagraphs@cuda`` entry where one has it, and otherwise from this
prior, which every prediction using it names in its warnings.

The prior
---------
Inductor's launch path is Python on the host, so its cost follows the host's speed: the prior
prices it against the host's own eager costs, with ratios measured by a GPU calibration
(``ftmodel calibrate --device cuda --frameworks eager,inductor`` on an H200 VM, 16 vCPUs, torch
2.11, 2026-11-26; ``benchmarks/results/gpu-h200/h200-profile-run3-refit.json``). Costs are
effective ones: a per-event cost times the framework's in-model ``host_scale``.

* **Triton kernels** (every op class inductor generates code for: elementwise, norm, softmax,
  reduction, pool, copy, embedding): :data:`TRITON_PER_EAGER` times the host's eager
  elementwise kernel (19.2 µs against 11.7 µs there): the wrapper line, the autotuner preamble,
  Triton's argument binder and ``cuLaunchKernel``.
* **Extern kernels** (``extern_kernels.mm/addmm/bmm/convolution``, attention): library calls
  made through aten, priced as this host's eager kernels of the same class.
* **Per forward call** :data:`CALL_PER_EAGER` eager elementwise kernels: dynamo's guards, the
  compiled graph's wrapper and its buffers (65.8 µs there).
* **inductor-cudagraphs** (``mode="reduce-overhead"``): the host's ``cudagraphs`` costs (one
  graph replay, a device gap per kernel node) plus :data:`COMPILED_CALL_S` per call for the
  guards and wrapper, tritonbench's end-to-end one-kernel compiled call less that kernel
  (44.3 µs - 6.8 µs; meta-pytorch/tritonbench pull request 1017, "Profile inductor launch
  overhead and add per-kernel benchmark", 2026-04-14, GB200 host), unscaled.

A host whose eager costs lack an elementwise kernel takes tritonbench's absolute figures
(:data:`TRITON_LAUNCH_S` per launch, :data:`COMPILED_CALL_S` per call). What is not in the
prior: arguments per kernel, recompilation, and any difference between hosts in inductor's
cost relative to eager's (one machine measured it).
"""

from __future__ import annotations

from ftmodel.hardware.profile import DEVICE_TERMS, KIND_SCALES, FrameworkHost, HostProfile

__all__ = ["BORROWS_FROM", "CALL_PER_EAGER", "COMPILED_CALL_S", "EXTERN_CLASSES",
           "OWN_LAYOUT_CLASSES", "PRIOR_SOURCE", "TRITON_CLASSES", "TRITON_LAUNCH_S",
           "TRITON_PER_EAGER", "gpu_host_key", "inductor_gpu_host"]

# effective costs against the same host's eager elementwise kernel (its per-event cost times
# eager's in-model host_scale), H200 VM of 2026-11-26 (module docstring)
TRITON_PER_EAGER = 1.64  # one Triton launch: 15.31 µs × 1.253 / (7.83 µs × 1.490)
CALL_PER_EAGER = 5.63  # one compiled call: 65.76 µs / (7.83 µs × 1.490)
# tritonbench PR 1017 (GB200 host): hosts without an eager elementwise cost, and the guards and
# wrapper of inductor-cudagraphs
TRITON_LAUNCH_S = 8.0e-6  # between the 0- and 19-argument CachingAutotuner.run figures
COMPILED_CALL_S = 37.5e-6  # end-to-end one-kernel compiled call (44.3 µs) less its kernel
# op classes inductor leaves to libraries (cuBLAS, cuDNN, flash attention) on a GPU
EXTERN_CLASSES = ("gemm", "bmm", "conv", "conv_grouped", "attention")
# op classes inductor generates Triton kernels for on a GPU: each launched by the same wrapper
# line and CachingAutotuner.run, whatever it computes
TRITON_CLASSES = ("elementwise", "norm", "softmax", "reduction", "pool", "copy", "embedding",
                   "other")
PRIOR_SOURCE = ("each Triton launch at 1.64 and each compiled call at 5.63 of this host's eager "
                "elementwise kernels (ratios a GPU calibration of an H200 VM measured, "
                "2026-11-26), extern GEMMs and convolutions at its eager costs")
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
    source = PRIOR_SOURCE
    if framework == "inductor":
        scale = base.in_model.get("host_scale", 1.0)  # eager's costs as they add up in a model
        eager = base.per_event_s.get("kernel:elementwise", 0.0) * scale
        launch, call = ((TRITON_PER_EAGER * eager, CALL_PER_EAGER * eager) if eager > 0.0
                        else (TRITON_LAUNCH_S, COMPILED_CALL_S))
        if eager <= 0.0:
            source = ("tritonbench PR 1017 (2026-04-14, GB200 host): 8 µs per Triton launch, "
                      "37.5 µs per compiled call (this host has no eager elementwise cost)")
        per = {f"kernel:{c}": launch for c in TRITON_CLASSES}
        per.update({f"kernel:{c}": base.per_event_s.get(f"kernel:{c}", eager or launch) * scale
                    for c in EXTERN_CLASSES})
        costs = FrameworkHost(per, per_call_s=call)
    else:
        # the replay's costs as cudagraphs' own predictions add them up (its host_scale; its
        # device-side terms belong to the device half it was calibrated with)
        costs = FrameworkHost(dict(base.per_event_s), per_call_s=base.per_call_s
                              + COMPILED_CALL_S, in_model={
                                  k: v for k, v in base.in_model.items()
                                  if k not in DEVICE_TERMS + KIND_SCALES})
        source = ("tritonbench PR 1017 (2026-04-14, GB200 host): 37.5 µs per compiled call "
                  "for the guards and wrapper")
    warning = (f"{framework} host costs on a GPU are a prior, not measured on host "
               f"{host.name!r}: {source}" + ("" if framework == "inductor" else
                                             f"; graph replay at {host.name!r}'s "
                                             "cudagraphs costs")
               + f". To measure them, calibrate on a CUDA machine (`ftmodel calibrate "
               f"--device cuda --frameworks {framework}`) and predict with that profile.")
    return costs, warning
