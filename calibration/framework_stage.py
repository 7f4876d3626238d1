"""The stages of a calibration for one framework other than eager (onnxruntime, torchscript,
inductor; cudagraphs on a GPU).

In order (:mod:`ftmodel.calibration.suite` says why each is done as it is): chained tiny-op
programs built and run through the framework's own runner and their events counted by its own
lowering (:mod:`ftmodel.calibration.framework_host`); on a CPU, the framework's own op curves
(:mod:`ftmodel.calibration.framework_ops`) and, for a runtime with its own memory arena, its cache
probe (:mod:`ftmodel.calibration.runtime_timing`); the host programs timed again after each of
those stages, ``passes`` times in all, each keeping its median; then the in-model stage through
the framework (:mod:`ftmodel.calibration.in_model_cpu`, :mod:`ftmodel.calibration.in_model_gpu`).
"""

from __future__ import annotations

import time

from ftmodel.calibration.calibration_run import CalibrationRun
from ftmodel.calibration.framework_host import (build_framework_programs, compile_limits,
                                                fit_framework_passes, time_framework_programs)
from ftmodel.calibration.framework_ops import FRAMEWORK_SWEEPS, framework_curves
from ftmodel.calibration.in_model_cpu import in_model_stage
from ftmodel.calibration.in_model_gpu import in_model_stage_async
from ftmodel.calibration.runtime_timing import RUNTIME_CHAINS, runtime_cache_stage
from ftmodel.hardware.profile import FrameworkHost

__all__ = ["framework_stage"]


def framework_stage(run: CalibrationRun, fw_name: str) -> None:
    """Measure ``fw_name``'s host part (and, on a CPU, its own curves) into ``run``; the seconds
    it took go into ``provenance.framework_stage_s``."""
    t0 = time.time()
    cpu = run.device == "cpu"
    with compile_limits(fw_name):
        built = build_framework_programs(fw_name, run.device, run.quick)
        fw_passes: list[dict[str, tuple[float, float]]] = []

        def host_pass() -> FrameworkHost:
            """Time the framework's programs once more; the fit of all passes, put in the
            host profile."""
            fw_passes.append(time_framework_programs(built, run.device, run.rounds,
                                                     run.round_s))
            run.bar.step(f"{fw_name} host programs", 1)
            fitted = fit_framework_passes(built, fw_passes)
            run.set_framework(fw_name, fitted)
            return fitted

        ffh = host_pass()  # then again after each stage, `passes` in all
        run.write()
        if fw_name in FRAMEWORK_SWEEPS and cpu:
            curves, curve_raw = framework_curves(
                fw_name, run.snapshot(False).device, run.device, run.quick, rounds=run.rounds,
                round_s=run.round_s, step=run.bar.step)
            run.classes.update(curves)
            run.raw.update(curve_raw)
            run.write()
            run.probe(f"{fw_name} curves")
            if len(fw_passes) < run.passes:
                ffh = host_pass()
        if fw_name in RUNTIME_CHAINS and cpu and run.cold:
            if run.cache.get("stream_share"):  # a shared cache model to start from
                run.cache.update(runtime_cache_stage(fw_name, run.llc_bytes, run.quick,
                                                     run.rounds, run.cache, run.provenance))
            run.bar.step(f"{fw_name} cache probe", 1)
            run.write()
            if len(fw_passes) < run.passes:
                ffh = host_pass()
        while len(fw_passes) < run.passes:
            ffh = host_pass()
        if cpu:
            ffh = in_model_stage(run.snapshot(False), ffh, run.device, run.quick, run.rounds,
                                 fw_name, run.measured_nets)
        else:
            ffh = in_model_stage_async(run.snapshot(False), ffh, run.device, run.quick,
                                       run.rounds, fw_name)
        run.probe(f"{fw_name} in-model")
    run.set_framework(fw_name, ffh)
    stage_s = run.provenance.setdefault("framework_stage_s", {})
    stage_s[fw_name] = round(time.time() - t0, 1)
    run.bar.step(f"{fw_name} synthetic networks", 1)
    run.write()
