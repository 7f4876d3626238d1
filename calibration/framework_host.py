"""Host costs of a compiled framework (onnxruntime, torchscript, inductor; cudagraphs on a GPU).

Chained tiny-op programs (:func:`ftmodel.calibration.dispatch.compiled_host_programs`) are built and run
through the framework's own runner, their events counted by its own ``lower_model`` (exactly
what a prediction counts), and seconds per event plus a constant per-call cost are fitted by
NNLS in relative error (:func:`ftmodel.calibration.dispatch.fit_event_costs`). Build/compile time is
recorded per program. A calibration builds the programs once and times them in several passes
spread over the framework's stage (before and after its own curves and cache probe); each
program keeps its median (:func:`fit_framework_passes`), as eager's host programs do.

inductor on a GPU launches every generated kernel, whatever it computes, through the same
wrapper line and ``CachingAutotuner.run``: its Triton classes
(:data:`ftmodel.hardware.host_priors.TRITON_CLASSES`) share one fitted cost
(:func:`fit_framework_costs`). Fitted per class, the tiny programs cannot tell them apart from
the library calls beside them (a convolution block launches a layout copy, a convolution and a
norm kernel in equal numbers): an H200 calibration priced its convolutions at 0 and each copy
at 33 µs, and predicted ResNet-34 and RegNetX at half their time.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from ftmodel.calibration.dispatch import (INDUCTOR_PATTERNS, compiled_host_programs,
                                         fit_event_costs, pass_medians)
from ftmodel.errors import FrameworkUnsupported
from ftmodel.estimate.guards import GuardRow, guard_prices_s
from ftmodel.frameworks.base import get_framework
from ftmodel.hardware.host_priors import TRITON_CLASSES
from ftmodel.hardware.profile import FrameworkHost
from ftmodel.measure import measure_interleaved
from ftmodel.program import GUARD_MODULE, GUARD_TENSOR
from ftmodel.tracing.dispatch import trace

__all__ = ["PER_CALL", "TRITON", "FrameworkPrograms", "build_framework_programs",
           "fit_framework_costs", "fit_framework_passes", "time_framework_programs"]

PER_CALL = "__per_call__"  # the constant column of the per-framework host fit
TRITON = "kernel:triton"  # the shared column of inductor's Triton classes on a GPU


def fit_framework_costs(framework: str, device_type: str, event_counts: list[dict[str, int]],
                        times_s: list[float]) -> tuple[dict[str, float], float]:
    """(seconds per host event, seconds per call) of ``framework`` on ``device_type`` from its
    programs' event counts and times. inductor on a GPU: one cost for all Triton classes, given
    to every class in :data:`TRITON_CLASSES` (those its programs launched and the others)."""
    tied = (frozenset(f"kernel:{c}" for c in TRITON_CLASSES)
            if framework == "inductor" and device_type == "cuda" else frozenset())
    columns = []
    for counts in event_counts:
        merged = {PER_CALL: 1}
        for kind, n in counts.items():
            if kind.startswith("guard:"):  # priced by FrameworkHost.guards, not fitted
                continue
            key = TRITON if kind in tied else kind
            merged[key] = merged.get(key, 0) + n
        columns.append(merged)
    fit = fit_event_costs(columns, times_s)
    per_call = fit.pop(PER_CALL, 0.0)
    if TRITON in fit:
        launch = fit.pop(TRITON)
        fit.update({kind: launch for kind in sorted(tied)})
    return fit, per_call


@dataclass(frozen=True)
class FrameworkPrograms:
    """A compiled framework's host programs, built once and timed in one or more passes:
    ``run`` (program name → its runner), ``events`` (the host events its own lowering counts)
    and ``build_s`` (seconds to export or compile it)."""

    framework: str
    device_type: str
    run: dict[str, Callable[[], object]]
    events: dict[str, dict[str, int]]
    build_s: dict[str, float]


def build_framework_programs(framework: str, device: str, quick: bool) -> FrameworkPrograms:
    """Build ``framework``'s host programs through its own runner and count their events with
    its own lowering; a program the framework cannot run is left out."""
    fw = get_framework(framework)
    assert fw.runner is not None
    dev_type = "cpu" if device == "cpu" else "cuda"
    # inductor's C++ build is slow (1-3 s a program): only programs around extern kernels
    programs = compiled_host_programs(
        (3, 12) if quick else (4, 16), full=not quick,
        only=INDUCTOR_PATTERNS if framework == "inductor" else None)
    run: dict[str, Callable[[], object]] = {}
    events: dict[str, dict[str, int]] = {}
    build_s: dict[str, float] = {}
    for p in programs:
        b = int(p.inputs[0].shape[0])  # lowerings resize every input's dim 0 to the batch
        t0 = time.perf_counter()
        try:
            # the runner first: the artifact it builds also serves the lowering
            run[p.name] = fw.runner(p.module, p.inputs, b, device=dev_type, dtype="fp32")
            prog = fw.program(p.module, p.inputs, b, trace(p.module, p.inputs),
                              device=dev_type, dtype="fp32")
        except FrameworkUnsupported:
            run.pop(p.name, None)
            continue
        build_s[p.name] = time.perf_counter() - t0
        events[p.name] = {k: int(v) for k, v in prog.host_events.items() if v}
    return FrameworkPrograms(framework, dev_type, run, events, build_s)


def time_framework_programs(programs: FrameworkPrograms, device: str, rounds: int,
                            round_s: float) -> dict[str, tuple[float, float]]:
    """One timing of every program, interleaved: (seconds at the nominal host speed, spread)."""
    measured = measure_interleaved(programs.run, device=device, rounds=rounds, round_s=round_s,
                                   settle_s=get_framework(programs.framework).settle_s,
                                   host_share={n: 1.0 for n in programs.run})
    return {n: (m.time_s, m.spread) for n, m in measured.items()}


def fit_framework_passes(programs: FrameworkPrograms,
                         passes: Sequence[Mapping[str, tuple[float, float]]],
                         guards: tuple[GuardRow, ...] = ()) -> FrameworkHost:
    """The framework's host costs from its programs timed once or more (``passes``): each
    program's time is the median of its passes', the costs are fitted to those medians
    (:func:`fit_framework_costs`), and every pass's time is kept in the program's sample
    (``pass_time_s``) when there is more than one. ``guards`` (dynamo's, measured by
    :mod:`ftmodel.calibration.guards`): what a program's guards cost warm is taken off its time
    before the fit, and the rows go into the result."""
    rows = {n: pass_medians(n, passes) for n in programs.run}
    per_tensor, per_module = guard_prices_s(guards, 0.0)
    own = [float(r["time_s"]) - per_tensor * programs.events[n].get(GUARD_TENSOR, 0)
           - per_module * programs.events[n].get(GUARD_MODULE, 0) for n, r in rows.items()]
    fit, per_call = fit_framework_costs(programs.framework, programs.device_type,
                                        [programs.events[n] for n in rows], own)
    samples = tuple({"program": n, "events": programs.events[n], **r,
                     "build_s": round(programs.build_s[n], 3)} for n, r in rows.items())
    return FrameworkHost(per_event_s=fit, per_call_s=per_call, samples=samples, guards=guards)
