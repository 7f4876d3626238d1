"""The eager stages of a calibration: the eager host part and the device half all frameworks share.

In order (:mod:`ftmodel.calibration.suite` says why each is done as it is):

1. the host programs (:mod:`ftmodel.calibration.dispatch`), timed before the sweeps and again
   between every two sweep passes, each keeping its median;
2. on a CPU, the page-fault price (:mod:`ftmodel.calibration.allocator`), probed before the sweeps
   and after every pass (the median kept), glibc's mmap threshold after ``import torch`` (once,
   in a child process), and the cache probe (:mod:`ftmodel.calibration.cache`);
3. the op sweeps (:mod:`ftmodel.calibration.sweep_stage`), ``passes`` times over every class in
   turn, each sample keeping its median, then batch norm's per-plane cost
   (:mod:`ftmodel.calibration.planes`) and pools' per-window curves
   (:mod:`ftmodel.calibration.windows`);
4. the in-model stage: on a CPU the synthetic networks measured at the end of every pass
   (:mod:`ftmodel.calibration.in_model_cpu`), on a GPU once (:mod:`ftmodel.calibration.in_model_gpu`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import torch
from torch import nn

from ftmodel.calibration.allocator import median_probe, probe_mmap_threshold, probe_page_fault_s
from ftmodel.calibration.cache import fit_cache_model, probe_cache
from ftmodel.calibration.calibration_run import CalibrationRun
from ftmodel.calibration.dispatch import HostProgram, fit_host_passes
from ftmodel.calibration.in_model_cpu import (fit_in_model_stage, in_model_networks,
                                                measure_in_model, passes_record)
from ftmodel.calibration.in_model_gpu import in_model_stage_async
from ftmodel.calibration.ops import OP_SWEEP_CLASSES, OpSample
from ftmodel.calibration.planes import PLANES_SWEEP, plane_stage
from ftmodel.calibration.sweep_stage import (ClassTimes, class_curves, derived_curves,
                                             grouped_curves, measure_class, measure_group)
from ftmodel.calibration.windows import WINDOWS_SWEEP, window_stage
from ftmodel.estimate.timeline import host_costs_s
from ftmodel.frameworks import eager
from ftmodel.hardware.profile import FrameworkHost, OpClassData
from ftmodel.tracing.dispatch import trace

__all__ = ["eager_stage", "mmap_threshold_stage", "page_fault_stage", "pool_window_stage",
           "time_host_programs"]


def _events(module: nn.Module, inputs: Sequence[torch.Tensor]) -> dict[str, int]:
    prog = eager.lower(trace(module, tuple(inputs)))
    return {k: int(v) for k, v in prog.host_events.items() if v}


def time_host_programs(programs: list[HostProgram], device: str, rounds: int, round_s: float
                       ) -> dict[str, tuple[float, float]]:
    """One timing of every host program: (seconds at the nominal host speed, spread)."""
    return measure_group([(p.name, p.module, p.inputs) for p in programs], device, rounds,
                         round_s, host_share={p.name: 1.0 for p in programs})


def page_fault_stage(run: CalibrationRun) -> None:
    """Put this machine's price of a freshly mapped page (ftmodel.calibration.allocator) into
    the run's host profile."""
    run.provenance["page_fault_probe"] = probe_page_fault_s(run.rounds)
    run.bar.step("page-fault probe", 1)
    run.host = replace(run.host, page_fault_s=run.provenance["page_fault_probe"]["page_fault_s"])


def mmap_threshold_stage(run: CalibrationRun) -> None:
    """Put glibc's mmap threshold after ``import torch`` (ftmodel.calibration.allocator), where
    predictions start the heap simulation, into the run's host profile; leave it unmeasured (0)
    where malloc is not glibc's."""
    probe = probe_mmap_threshold()
    run.provenance["mmap_threshold_probe"] = probe
    run.bar.step("mmap threshold probe", 1)
    if probe is not None:
        run.host = replace(run.host, mmap_threshold_bytes=int(probe["mmap_threshold_bytes"]))


def pool_window_stage(run: CalibrationRun, samples: list[OpSample]) -> None:
    """Put pools' per-window curves (:mod:`ftmodel.calibration.windows`; ``samples``: its
    :func:`~ftmodel.calibration.windows.window_samples`) into the run's device half."""
    curves, run.raw[WINDOWS_SWEEP] = window_stage(samples, run.device, run.rounds, run.round_s,
                                                  run.flush)
    run.classes.update(curves)
    run.bar.step("pool windows", len(samples))
    run.write()


def _sweep_pass(run: CalibrationRun, sweeps: dict[str, list[OpSample]],
                times: dict[str, list[ClassTimes]], fh: FrameworkHost, n_pass: int) -> None:
    """One timing of every op class's samples; each class's curves from all its passes so far."""
    for cls in OP_SWEEP_CLASSES:
        if not sweeps[cls]:
            continue
        times.setdefault(cls, []).append(
            measure_class(sweeps[cls], run.device, run.rounds, run.round_s, run.flush))
        run.classes[cls], run.raw[cls], variants = class_curves(
            sweeps[cls], times[cls], run.device,
            host_s=lambda prog: float(host_costs_s(prog, fh, []).sum()))
        # e.g. conv:slow2d, conv:mkldnn, conv:mkldnn_unaligned
        run.classes.update(grouped_curves(f"{cls}:", run.classes[cls], variants))
        run.classes.update(derived_curves(cls, run.classes[cls], run.raw[cls]))
        label = f" pass {n_pass}/{run.passes}" if run.passes > 1 else ""
        run.bar.step(f"{cls} ({len(sweeps[cls])} sizes){label}", len(sweeps[cls]))
        run.write()


def eager_stage(run: CalibrationRun, programs: list[HostProgram],
                sweeps: dict[str, list[OpSample]], planes: list[OpSample],
                windows: list[OpSample] | None = None) -> None:
    """Measure the eager host part and the device half into ``run`` (module docstring)."""
    host_counts = [_events(p.module, p.inputs) for p in programs]
    host_passes = [time_host_programs(programs, run.device, run.rounds, run.round_s)]
    run.bar.step("host dispatch programs", len(programs))
    fh = fit_host_passes(programs, host_counts, host_passes)
    run.set_framework("eager", fh)
    if run.device == "cpu":  # before the in-model stage, which predicts with it
        page_fault_stage(run)
        mmap_threshold_stage(run)
    if run.flush is not None:
        run.provenance["cache_probe"] = probe_cache(run.device, run.flush, run.llc_bytes,
                                                    quick=run.quick)
        run.cache = fit_cache_model(run.provenance["cache_probe"])
        run.bar.step("cache probe", 1)
    times: dict[str, list[ClassTimes]] = {}
    # a CPU's synthetic networks are measured once per pass, as the sweep's samples
    nets = in_model_networks(run.snapshot(False), run.device, run.quick) \
        if run.device == "cpu" else None
    in_model_times: list[dict[tuple[str, int], float]] = []
    fault_probes = [run.provenance["page_fault_probe"]] if nets is not None else []
    for n_pass in range(1, run.passes + 1):  # each pass over every class in turn
        _sweep_pass(run, sweeps, times, fh, n_pass)
        if n_pass < run.passes:  # the host programs again, between two passes
            host_passes.append(time_host_programs(programs, run.device, run.rounds,
                                                  run.round_s))
            run.bar.step("host dispatch programs", len(programs))
            fh = fit_host_passes(programs, host_counts, host_passes)
            run.set_framework("eager", fh)
        if nets is not None:  # and the page-fault price, at each pass's end
            in_model_times.append(measure_in_model(nets, run.snapshot(False), run.device,
                                                   run.rounds))
            fault_probes.append(probe_page_fault_s(run.rounds))
    if planes:  # batch norm's cost per (image, channel) plane
        per_plane, run.raw[PLANES_SWEEP] = plane_stage(planes, run.classes, run.device,
                                                       run.rounds, run.round_s)
        run.classes.update(per_plane)
        run.bar.step("batch norm planes", len(planes))
        run.write()
    if windows:  # pools by the bytes their windows read
        pool_window_stage(run, windows)
    run.probe("op sweeps")
    math = [d for c, d in run.classes.items() if c.startswith("elementwise@")]
    if math:  # the union curve, for transcendental ops without their own
        run.classes["elementwise:math"] = OpClassData(
            "samples", tuple(r for d in math for r in d.samples),
            cold_s=tuple(t for d in math for t in d.cold_s)
            if all(d.cold_s for d in math) else ())
    if fault_probes:  # the median page-fault price over the probes
        pf = run.provenance["page_fault_probe"] = median_probe(fault_probes)
        run.host = replace(run.host, page_fault_s=pf["page_fault_s"])
    if nets is not None:  # every pass, as the op samples' (in_model_cpu's docstring)
        run.provenance.setdefault("in_model_passes", {})["eager"] = passes_record(
            in_model_times, range(len(in_model_times)))
        fh = fit_in_model_stage(run.snapshot(False), fh, nets, in_model_times)
        run.measured_nets["eager"] = nets
    else:
        fh = in_model_stage_async(run.snapshot(False), fh, run.device, run.quick, run.rounds)
    run.set_framework("eager", fh)
    run.probe("eager in-model")
    run.bar.step("synthetic networks", 1)
    run.write()
