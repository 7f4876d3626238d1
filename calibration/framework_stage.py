"""The stages of a calibration for one framework other than eager (onnxruntime, torchscript,
inductor; cudagraphs on a GPU).

In order (:mod:`ftmodel.calibration.suite` says why each is done as it is): for inductor on a
CPU, what dynamo's guards cost per tensor and module (:mod:`ftmodel.calibration.guards`); chained tiny-op
programs built and run through the framework's own runner and their events counted by its own
lowering (:mod:`ftmodel.calibration.framework_host`); on a CPU, the framework's own op curves
(:mod:`ftmodel.calibration.framework_ops`; ONNX Runtime's cost per inner call,
:mod:`ftmodel.calibration.ort_loops`) and, for a runtime with its own memory arena, its cache
probe (:mod:`ftmodel.calibration.runtime_timing`); the host programs timed again after each of
those stages, ``passes`` times in all, each keeping its median; then the in-model stage through
the framework (:mod:`ftmodel.calibration.in_model_cpu`, :mod:`ftmodel.calibration.in_model_gpu`).
On a CPU the in-model stage's synthetic networks are timed after every host pass (up to two
more where passes disagree) and the median of the passes that agree with the fastest fitted
(:func:`~ftmodel.calibration.in_model_cpu.kept_passes`): timed once, at the stage's end, a VM's
slow minute set the fit (two inductor calibrations on the 2-vCPU AMD EPYC Zen 4 guest, one
timing its networks at a reference GEMM of 0.84 ms, one at 1.01 ms, whose batch-1 CNN networks
came out 1.36-1.70x slower, priced the same corpus points 1.16x apart).
"""

from __future__ import annotations

import time

from ftmodel.calibration.calibration_run import CalibrationRun
from ftmodel.calibration.framework_host import (build_framework_programs, fit_framework_passes,
                                                time_framework_programs)
from ftmodel.calibration.framework_ops import FRAMEWORK_SWEEPS, framework_curves
from ftmodel.calibration.guards import measure_guards
from ftmodel.calibration.in_model_cpu import (InModelNetworks, Key, fit_in_model_stage,
                                                in_model_networks, kept_passes,
                                                measure_in_model, measure_until_agreed,
                                                passes_record)
from ftmodel.calibration.in_model_gpu import in_model_stage_async
from ftmodel.calibration.ort_loops import ort_loop_curves
from ftmodel.calibration.runtime_timing import RUNTIME_CHAINS, runtime_cache_stage
from ftmodel.estimate.guards import GuardRow
from ftmodel.hardware.profile import FrameworkHost

__all__ = ["framework_stage"]


def framework_stage(run: CalibrationRun, fw_name: str) -> None:
    """Measure ``fw_name``'s host part (and, on a CPU, its own curves) into ``run``; the seconds
    it took go into ``provenance.framework_stage_s``."""
    t0 = time.time()
    cpu = run.device == "cpu"
    built = build_framework_programs(fw_name, run.device, run.quick)
    guards: tuple[GuardRow, ...] = ()
    if fw_name == "inductor" and cpu:  # dynamo's guards, before the host fit that uses them
        guards, guard_raw = measure_guards(run.quick, run.rounds)
        run.provenance["inductor_guards"] = guard_raw
        run.bar.step(f"{fw_name} guards", 1)
    fw_passes: list[dict[str, tuple[float, float]]] = []
    nets: list[InModelNetworks] = []  # a CPU's synthetic networks, built after pass 1
    net_passes: list[dict[Key, float]] = []

    def host_pass() -> FrameworkHost:
        """Time the framework's programs once more; the fit of all passes, put in the
        host profile. On a CPU, the synthetic networks are timed after each pass too."""
        fw_passes.append(time_framework_programs(built, run.device, run.rounds,
                                                 run.round_s))
        run.bar.step(f"{fw_name} host programs", 1)
        fitted = fit_framework_passes(built, fw_passes, guards)
        run.set_framework(fw_name, fitted)
        if cpu:
            if not nets:
                nets.append(in_model_networks(run.snapshot(False), run.device, run.quick,
                                              fw_name))
            net_passes.append(measure_in_model(nets[0], run.snapshot(False), run.device,
                                               run.rounds))
        return fitted

    ffh = host_pass()  # then again after each stage, `passes` in all
    run.write()
    if fw_name in FRAMEWORK_SWEEPS and cpu:
        curves, curve_raw = framework_curves(
            fw_name, run.snapshot(False).device, run.device, run.quick, rounds=run.rounds,
            round_s=run.round_s, step=run.bar.step)
        run.classes.update(curves)
        run.raw.update(curve_raw)
        if FRAMEWORK_SWEEPS[fw_name].own_samples:  # ONNX Runtime's cost per inner call
            loops, loop_raw = ort_loop_curves(run.snapshot(False).device, run.classes,
                                              run.device, run.quick, rounds=run.rounds,
                                              round_s=run.round_s)
            run.classes.update(loops)
            run.raw.update(loop_raw)
            run.bar.step(f"{fw_name} inner calls", 1)
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
    if cpu:  # the median of the networks' passes that agree with the fastest (in_model_cpu)
        measure_until_agreed(lambda: measure_in_model(nets[0], run.snapshot(False), run.device,
                                                      run.rounds), net_passes)
        kept = kept_passes(net_passes)
        run.provenance.setdefault("in_model_passes", {})[fw_name] = passes_record(net_passes,
                                                                                  kept)
        ffh = fit_in_model_stage(run.snapshot(False), ffh, nets[0], net_passes, kept)
        run.measured_nets[fw_name] = nets[0]
    else:
        ffh = in_model_stage_async(run.snapshot(False), ffh, run.device, run.quick,
                                   run.rounds, fw_name)
    run.probe(f"{fw_name} in-model")
    run.set_framework(fw_name, ffh)
    stage_s = run.provenance.setdefault("framework_stage_s", {})
    stage_s[fw_name] = round(time.time() - t0, 1)
    run.bar.step(f"{fw_name} synthetic networks", 1)
    run.write()
