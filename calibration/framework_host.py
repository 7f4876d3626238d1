"""Host costs of a compiled framework (onnxruntime, torchscript, inductor; cudagraphs on a GPU).

Chained tiny-op programs (:func:`ftmodel.calibration.dispatch.compiled_host_programs`) are built and run
through the framework's own runner, their events counted by its own ``lower_model`` (exactly
what a prediction counts), and seconds per event plus a constant per-call cost are fitted by
NNLS in relative error (:func:`ftmodel.calibration.dispatch.fit_event_costs`). Build/compile time is
recorded per program.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from ftmodel.calibration.dispatch import INDUCTOR_PATTERNS, compiled_host_programs, fit_event_costs
from ftmodel.errors import FrameworkUnsupported
from ftmodel.frameworks.base import get_framework
from ftmodel.hardware.profile import FrameworkHost
from ftmodel.measure import measure_interleaved
from ftmodel.tracing.dispatch import trace

__all__ = ["PER_CALL", "compile_limits", "framework_host_stage"]

PER_CALL = "__per_call__"  # the constant column of the per-framework host fit


def framework_host_stage(framework: str, device: str, quick: bool, rounds: int,
                           round_s: float) -> FrameworkHost:
    """Host costs of a compiled framework: its runner times, its lowering counts, NNLS fit."""
    fw = get_framework(framework)
    assert fw.runner is not None
    dev_type = "cpu" if device == "cpu" else "cuda"
    # inductor's C++ build is slow (1-3 s a program): only programs around extern kernels
    programs = compiled_host_programs(
        (3, 12) if quick else (4, 16), full=not quick,
        only=INDUCTOR_PATTERNS if framework == "inductor" else None)
    fns: dict[str, Callable[[], object]] = {}
    counts: dict[str, dict[str, int]] = {}
    build_s: dict[str, float] = {}
    for p in programs:
        b = int(p.inputs[0].shape[0])  # lowerings resize every input's dim 0 to the batch
        t0 = time.perf_counter()
        try:
            prog = fw.program(p.module, p.inputs, b, trace(p.module, p.inputs),
                              device=dev_type, dtype="fp32")
            fns[p.name] = fw.runner(p.module, p.inputs, b, device=dev_type, dtype="fp32")
        except FrameworkUnsupported:
            continue
        build_s[p.name] = time.perf_counter() - t0
        counts[p.name] = {k: int(v) for k, v in prog.host_events.items() if v}
    measured = measure_interleaved(fns, device=device, rounds=rounds, round_s=round_s,
                                   settle_s=fw.settle_s)
    names = list(fns)
    times = [measured[n].time_s for n in names]
    fit = fit_event_costs([counts[n] | {PER_CALL: 1} for n in names], times)
    per_call = fit.pop(PER_CALL, 0.0)
    samples = tuple({"program": n, "events": counts[n], "time_s": t,
                     "spread": measured[n].spread, "build_s": round(build_s[n], 3)}
                    for n, t in zip(names, times))
    return FrameworkHost(per_event_s=fit, per_call_s=per_call, samples=samples)


class compile_limits:
    """inductor: every calibration program shares a forward code object (_Chain, Sequential);
    raise dynamo's recompile limit so none silently falls back to eager while measured."""

    def __init__(self, framework: str) -> None:
        self.patch: Any = None
        if framework == "inductor":
            import torch._dynamo.config as cfg
            self.patch = cfg.patch(recompile_limit=512, accumulated_recompile_limit=8192)

    def __enter__(self) -> None:
        if self.patch is not None:
            self.patch.__enter__()

    def __exit__(self, *exc: object) -> None:
        if self.patch is not None:
            self.patch.__exit__(*exc)
