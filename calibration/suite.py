"""The calibration suite: measure this machine once, write a versioned JSON profile.

``calibrate(device="cpu", frameworks=("eager",), out=...)`` runs, in order:

1. host programs (``ftmodel.calibration.dispatch``): tiny-op programs, timed, and a non-negative fit of
   seconds per host event (module call, torch call, view, allocation, kernel by op class). They
   are timed before the sweeps and again between every two sweep passes, and each program
   keeps its median (:func:`ftmodel.calibration.dispatch.fit_host_passes`): timed once, the
   same programs in two fresh calibrations on the AMD EPYC moved by a median 0.13 in log
   (P90 0.56), and a module call's fitted cost by 2.6x between four calibrations;
2. per-op-class sweeps (``ftmodel.calibration.ops``): single ops across size grids, timed in rounds
   interleaved with a tiny-size floor of the same call; the device time of each is its time
   minus its floor (the floor is host cost, which stage 1 prices). Every sample is timed twice:
   hot (the same operands over and over, as a sweep does) and cold (right after a flush of the
   last-level cache, as weights and skip connections arrive inside a large model); the device
   half records both, and the cache probe (``ftmodel.calibration.cache``) fits when operands turn cold
   inside a model, for :mod:`ftmodel.estimate.cache`. The sweeps run ``passes`` times (3 by
   default), each pass over every class in turn, and each sample keeps its median over the
   passes: on the 2-vCPU AMD EPYC, the same sample in two fresh single-pass calibrations
   differed by a median 7-17% (samples over 2 ms), and the spread of its rounds within one pass
   did not tell which samples had moved (rank correlation 0.00-0.12);
3. the in-model stage (``ftmodel.calibration.networks``; on a GPU ``ftmodel.calibration.in_model_gpu``) for
   eager; on a CPU its networks are measured at the end of every sweep pass and each keeps its
   median (``ftmodel.calibration.in_model_cpu``): measured once, at the end, the fitted device
   scale of three fresh calibrations on the AMD EPYC was 1.03, 1.02 and 0.93, whose op curves
   agreed within 1-3% per class. The page-fault price (``ftmodel.calibration.allocator``) is
   probed before the sweeps and after every pass, and the median probe is kept;
4. for each other framework asked for (onnxruntime, torchscript, inductor): chained tiny-op
   programs (``ftmodel.calibration.dispatch.compiled_host_programs``; :mod:`ftmodel.calibration.framework_host`)
   built and run through that framework's own runner, their events counted by its own
   ``lower_model`` (exactly what a prediction counts), timed ``passes`` times (once after the
   build, again after the framework's own curves and after its cache probe, the rest before
   its in-model stage), each program keeping its median, and a NNLS fit in relative error of
   seconds per event plus a constant ``per_call_s``; then the same in-model stage through that
   framework. Device curves are the eager sweeps' (the profile's device half is shared: a fused
   kernel costs its bytes on the same per-op curves) and, for ONNX Runtime and inductor, their
   own (:mod:`ftmodel.calibration.framework_ops`). Build/compile time counts towards the calibration's
   duration.

Eager is always calibrated: the sweeps that give the device half need it, except with
``update=True`` (``ftmodel calibrate --update``), which re-measures only the named non-eager
frameworks into an existing profile of this machine (:mod:`ftmodel.calibration.update`).

After every stage the profile so far is written atomically to ``out``, so an interrupted run keeps
what it measured (``provenance.complete`` is false and the missing op classes are listed).

On a CPU every measurement is expressed at one machine speed (:mod:`ftmodel.speed`): a
reference GEMM is timed around each block of calls and each time is scaled by the reference's
nominal time over its time then. The nominal time is taken at the start; at the end the
finished profile is re-expressed at the median of all the references it took
(:func:`ftmodel.hardware.rescale.at_speed`: the machine's typical speed, not its speed in the
first seconds), which ``provenance.speed.reference_s`` records with the references seen, so
that a benchmark can express what it measures at the same speed; each framework's in-model terms
are then fitted again to its networks' recorded times against the re-expressed curves
(:func:`ftmodel.calibration.in_model_cpu.refit_in_model`), since the re-expression moves each op
class by its own blend of the references. A profile updated with
``--update`` measures at its own nominal time. Around the stages the reference is also timed on
its own (:mod:`ftmodel.calibration.speed_probe`; ``provenance.reference_probe``, one entry per
stage boundary): ``provenance.reference_drift`` (slowest / fastest − 1) says how much the
machine's own speed moved while it was measured. Before the scaling, two fresh calibrations of a
shared 2-vCPU VM that disagreed by 10% in their in-model device scale had seen their reference
move by 13% during one of them; a drift above ``DRIFT_WARNING`` is reported by ``ftmodel
calibrate``.

On CUDA the device is marked asynchronous and timed with CUDA events; three things differ: the
sweeps use the GPU-sized grid (:data:`ftmodel.calibration.ops.GPU_GRID`, operands made on the GPU), a
sample's device time is read from replays of a CUDA graph of repeated calls instead of time
minus floor (an eagerly launched small op is host-bound there), and the in-model stage fits the
device and host halves separately in the timeline's max-plus form
(:mod:`ftmodel.calibration.in_model_gpu`).
"""

from __future__ import annotations

import datetime as _dt
import os
import socket
import time
from dataclasses import replace
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ftmodel.calibration.allocator import median_probe, page_fault_probe_stale, probe_page_fault_s
from ftmodel.calibration.cache import fit_cache_model, probe_cache
from ftmodel.calibration.dispatch import HostProgram, fit_host_passes, host_programs
from ftmodel.calibration.framework_host import (build_framework_programs, compile_limits,
                                                fit_framework_passes, time_framework_programs)
from ftmodel.calibration.framework_ops import FRAMEWORK_SWEEPS, framework_curve_steps, framework_curves
from ftmodel.calibration.in_model_cpu import (InModelNetworks, fit_in_model_stage,
                                              in_model_networks, in_model_stage,
                                              measure_in_model, refit_profile)
from ftmodel.calibration.in_model_gpu import in_model_stage_async
from ftmodel.calibration.ops import CPU_GRID, GPU_GRID, OP_SWEEP_CLASSES, op_samples
from ftmodel.calibration.planes import PLANES_SWEEP, plane_samples, plane_stage
from ftmodel.calibration.progress import CalibrationProgress
from ftmodel.calibration.sweep_stage import (ClassTimes, class_curves, derived_curves,
                                             grouped_curves, measure_class, measure_group)
from ftmodel.hardware.rescale import at_speed
from ftmodel.calibration.runtime_timing import RUNTIME_CHAINS, runtime_cache_stage
from ftmodel.calibration.speed_probe import reference_drift, reference_probe_s, speed_meter_for
from ftmodel.calibration.update import kept_for_update, profile_to_update
from ftmodel.errors import BackendUnavailable, InvalidArgumentError
from ftmodel.estimate.timeline import host_costs_s
from ftmodel.frameworks import eager
from ftmodel.frameworks.base import canonical_framework, framework_names, get_framework
from ftmodel.hardware.profile import (DeviceProfile, FrameworkHost, HardwareProfile, HostProfile,
                                      OpClassData, write_profile)
from ftmodel.hardware.registry import default_profile_path
from ftmodel.measure import (allocator_setting, cache_flusher, cpu_identity, cpu_name, keep_heap,
                             last_level_cache_bytes, set_threads)
from ftmodel.speed import speed_normalised
from ftmodel.tracing.dispatch import trace

__all__ = ["DEFAULT_PASSES", "calibrate"]

# How many times a full calibration times its op sweeps (the median of each sample's passes)
DEFAULT_PASSES = 3


def _events(module: nn.Module, inputs: Sequence[torch.Tensor]) -> dict[str, int]:
    prog = eager.lower(trace(module, tuple(inputs)))
    return {k: int(v) for k, v in prog.host_events.items() if v}


def _host_pass(programs: list[HostProgram], device: str, rounds: int, round_s: float
               ) -> dict[str, tuple[float, float]]:
    """One timing of every host program: (seconds at the nominal host speed, spread)."""
    return measure_group([(p.name, p.module, p.inputs) for p in programs], device, rounds,
                         round_s, host_share={p.name: 1.0 for p in programs})


def _page_fault_stage(host: HostProfile, provenance: dict[str, Any], rounds: int,
                      bar: CalibrationProgress) -> HostProfile:
    """``host`` with this machine's price of a freshly mapped page (ftmodel.calibration.allocator)."""
    provenance["page_fault_probe"] = probe_page_fault_s(rounds)
    bar.step("page-fault probe", 1)
    return replace(host, page_fault_s=provenance["page_fault_probe"]["page_fault_s"])


def _canonical_or_raw(name: str) -> str:
    try:
        return canonical_framework(name)
    except Exception:  # noqa: BLE001 - reported below with the supported list
        return name


def calibrate(device: str = "cpu", frameworks: Iterable[str] = ("eager",),
              out: str | os.PathLike[str] | None = None, *, threads: int | None = None,
              quick: bool = False, progress: bool = True, name: str | None = None,
              cold: bool = True, update: bool = False, default_malloc: bool = False,
              passes: int | None = None) -> HardwareProfile:
    """Measure this machine and write its profile to ``out`` (default: the user cache).

    Unless ``default_malloc``, glibc's heap is kept mapped for the rest of the process first
    (:func:`ftmodel.measure.keep_heap`: the measurement protocol, recorded in the provenance as
    ``allocator``); validate with the same setting.

    ``update``: ``out`` holds a profile of this machine already; measure only the frameworks
    other than eager named in ``frameworks`` (host costs, own curves, in-model stage) and
    replace theirs, keeping the eager host part and the device half as they are (a framework
    installed later, or one re-measured after a change to its stages). The profile's
    provenance lists each update.

    ``passes``: how many times the op sweeps are timed, each pass over every class in turn; a
    sample's time is its median over the passes (default 3, 1 with ``quick``). See the module
    docstring for why.
    """
    fws = tuple(dict.fromkeys(_canonical_or_raw(f) for f in frameworks))
    supported = framework_names(runnable=True)  # the ones calibration can run and time
    unknown = [f for f in fws if f not in supported]
    if unknown:
        raise InvalidArgumentError(f"cannot calibrate framework(s) {unknown}; supported: "
                                   f"{', '.join(supported)}")
    gpu_only = [f for f in fws if get_framework(f).needs_gpu]  # e.g. captured CUDA graphs
    if gpu_only and not device.startswith("cuda"):
        raise InvalidArgumentError(
            f"framework(s) {gpu_only} run on a GPU only and cannot be calibrated on "
            f"device {device!r}; use --device cuda on a machine with an NVIDIA GPU")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise BackendUnavailable(f"device {device!r} requested but CUDA is not available here; "
                                 "use --device cpu or run on a machine with an NVIDIA GPU")
    if not (device == "cpu" or device.startswith("cuda")):
        raise InvalidArgumentError(f"device must be 'cpu' or 'cuda[:N]', got {device!r}")
    n_threads = set_threads(threads)
    if not default_malloc:
        keep_heap()
    name = name or ("local-cpu" if device == "cpu" else f"local-{device.replace(':', '')}")
    path = Path(out) if out is not None else default_profile_path(name)
    base = (profile_to_update(path, device, n_threads, cpu_name(), allocator_setting(),
                              cpu_identity())
            if update else None)
    if (base is not None and all(f == "eager" for f in fws)
            and not (device == "cpu" and page_fault_probe_stale(base.host, base.provenance))):
        raise InvalidArgumentError(
            "--update re-measures frameworks other than eager (and an outdated page-fault "
            "price) into an existing profile, and none was named (frameworks: "
            f"{', '.join(fws)}); name one, e.g. --frameworks inductor, or calibrate afresh to "
            "re-measure eager")
    rounds, round_s = (3, 0.015) if quick else (5, 0.03)
    passes = (1 if quick else DEFAULT_PASSES) if passes is None else passes
    if isinstance(passes, bool) or not isinstance(passes, int) or passes < 1:
        raise InvalidArgumentError(f"passes must be a whole number >= 1, got {passes!r}; use 1 "
                                   f"on a quiet machine, {DEFAULT_PASSES} (the default) on a "
                                   "shared one")
    programs = host_programs()
    if device.startswith("cuda"):  # GPU-sized operands (20 GB) are made where they are used
        with torch.device(device):
            sweeps = op_samples(quick, GPU_GRID)
    else:
        sweeps = op_samples(quick, CPU_GRID)
    planes = plane_samples(quick) if device == "cpu" and base is None else []
    extra = [f for f in fws if f != "eager"]
    total = (0 if base else passes * (len(programs) + sum(len(v) for v in sweeps.values())) + 2
             + len(planes)) \
        + (passes + 1) * len(extra) + framework_curve_steps(extra, device) \
        + sum(device == "cpu" and cold for f in extra if f in RUNTIME_CHAINS) \
        + (device == "cpu" and (base is None
                                or page_fault_probe_stale(base.host, base.provenance)))
    bar = CalibrationProgress(progress, total)
    started = time.time()
    dev_name = cpu_name() if device == "cpu" else torch.cuda.get_device_name(device)
    provenance: dict[str, Any] = {
        "device": dev_name, "host_cpu": cpu_name(), "cpu_identity": cpu_identity(),
        "hostname": socket.gethostname(),
        "threads": n_threads, "allocator": allocator_setting(), "torch": torch.__version__, "date": _dt.datetime.now(
            _dt.timezone.utc).isoformat(timespec="seconds"),
        "settings": {"quick": quick, "rounds": rounds, "round_s": round_s, "passes": passes},
        "frameworks": list(fws), "complete": False,
    }
    for fw_name in fws:
        get_framework(fw_name).check_installed()
    if "onnxruntime" in fws:
        import onnxruntime
        provenance["onnxruntime"] = onnxruntime.__version__
    host = HostProfile(name=f"{name}-host", cpu=cpu_name(), threads=n_threads, frameworks={},
                       drives="cpu" if device == "cpu" else "cuda")
    classes: dict[str, OpClassData] = {}
    raw: dict[str, list[dict[str, Any]]] = {}
    llc_bytes = last_level_cache_bytes(device)
    flush = cache_flusher(device, llc_bytes) if cold else None
    provenance["last_level_cache_bytes"] = llc_bytes
    cache: dict[str, float] = {}
    if base is not None:
        kept = kept_for_update(base, extra, provenance)
        classes, raw, cache, host, provenance = (kept.classes, kept.raw, kept.cache, kept.host,
                                                 kept.provenance)
        started = time.time() - kept.duration_s

    def snapshot(complete: bool) -> HardwareProfile:
        provenance.update(complete=complete, duration_s=round(time.time() - started, 1),
                          missing_op_classes=[c for c in OP_SWEEP_CLASSES if c not in classes],
                          raw_op_times=raw)
        dev = DeviceProfile(name=dev_name, type="cpu" if device == "cpu" else "cuda",
                            execution="sync" if device == "cpu" else "async",
                            op_classes=dict(classes), dtypes=("fp32",), cache=dict(cache))
        if meter is not None:  # an update keeps the nominal time and where it came from
            provenance["speed"] = {**provenance.get("speed", {}), **meter.summary()}
        return HardwareProfile(name=name, kind="calibrated", device=dev, host=host,
                               provenance=dict(provenance))

    in_model = in_model_stage_async if device.startswith("cuda") else in_model_stage
    meter = speed_meter_for(device, base)
    probes: list[dict[str, Any]] = list(provenance.get("reference_probe", []))
    provenance["reference_probe"] = probes
    # each CPU framework's synthetic networks, kept to fit its in-model terms again against
    # the curves the profile is written with (refit_in_model)
    measured_nets: dict[str, InModelNetworks] = {}

    def probe(stage: str) -> None:
        probes.append({"stage": stage, "s": reference_probe_s(device, rounds),
                       "at_s": round(time.time() - started, 1)})
        provenance["reference_drift"] = round(reference_drift(probes), 4)

    try:
        with torch.no_grad(), speed_normalised(meter):
            probe("start")
            if base is None:  # the eager host part and the shared device half
                host_counts = [_events(p.module, p.inputs) for p in programs]
                host_passes = [_host_pass(programs, device, rounds, round_s)]
                bar.step("host dispatch programs", len(programs))
                fh = fit_host_passes(programs, host_counts, host_passes)
                host = replace(host, frameworks={"eager": fh})
                if device == "cpu":  # before the in-model stage, which predicts with it
                    host = _page_fault_stage(host, provenance, rounds, bar)
                if flush is not None:
                    provenance["cache_probe"] = probe_cache(device, flush, llc_bytes, quick=quick)
                    cache = fit_cache_model(provenance["cache_probe"])
                    bar.step("cache probe", 1)
                times: dict[str, list[ClassTimes]] = {}
                # a CPU's synthetic networks are measured once per pass, as the sweep's samples
                nets = in_model_networks(snapshot(False), device, quick) \
                    if device == "cpu" else None
                in_model_times: list[dict[tuple[str, int], float]] = []
                fault_probes = [provenance["page_fault_probe"]] if nets is not None else []
                for n_pass in range(1, passes + 1):  # each pass over every class in turn
                    for cls in OP_SWEEP_CLASSES:
                        if not sweeps[cls]:
                            continue
                        times.setdefault(cls, []).append(
                            measure_class(sweeps[cls], device, rounds, round_s, flush))
                        classes[cls], raw[cls], variants = class_curves(
                            sweeps[cls], times[cls], device,
                            host_s=lambda prog: float(host_costs_s(prog, fh, []).sum()))
                        # e.g. conv:slow2d, conv:mkldnn, conv:mkldnn_unaligned
                        classes.update(grouped_curves(f"{cls}:", classes[cls], variants))
                        classes.update(derived_curves(cls, classes[cls], raw[cls]))
                        label = f" pass {n_pass}/{passes}" if passes > 1 else ""
                        bar.step(f"{cls} ({len(sweeps[cls])} sizes){label}", len(sweeps[cls]))
                        write_profile(snapshot(False), path)
                    if n_pass < passes:  # the host programs again, between two passes
                        host_passes.append(_host_pass(programs, device, rounds, round_s))
                        bar.step("host dispatch programs", len(programs))
                        fh = fit_host_passes(programs, host_counts, host_passes)
                        host = replace(host, frameworks={"eager": fh})
                    if nets is not None:  # and the page-fault price, at each pass's end
                        in_model_times.append(measure_in_model(nets, snapshot(False), device,
                                                               rounds))
                        fault_probes.append(probe_page_fault_s(rounds))
                if planes:  # batch norm's cost per (image, channel) plane
                    per_plane, raw[PLANES_SWEEP] = plane_stage(planes, classes, device, rounds,
                                                               round_s)
                    classes.update(per_plane)
                    bar.step("batch norm planes", len(planes))
                    write_profile(snapshot(False), path)
                probe("op sweeps")
                math = [d for c, d in classes.items() if c.startswith("elementwise@")]
                if math:  # the union curve, for transcendental ops without their own
                    classes["elementwise:math"] = OpClassData(
                        "samples", tuple(r for d in math for r in d.samples),
                        cold_s=tuple(t for d in math for t in d.cold_s)
                        if all(d.cold_s for d in math) else ())
                if fault_probes:  # the median page-fault price over the probes
                    pf = provenance["page_fault_probe"] = median_probe(fault_probes)
                    host = replace(host, page_fault_s=pf["page_fault_s"])
                if nets is not None:
                    fh = fit_in_model_stage(snapshot(False), fh, nets, in_model_times)
                    measured_nets["eager"] = nets
                else:
                    fh = in_model(snapshot(False), fh, device, quick, rounds)
                host = replace(host, frameworks={"eager": fh})
                probe("eager in-model")
                bar.step("synthetic networks", 1)
                write_profile(snapshot(False), path)
            if device == "cpu" and page_fault_probe_stale(host, provenance):  # older profile
                host = _page_fault_stage(host, provenance, rounds, bar)
                write_profile(snapshot(False), path)
            stage_s: dict[str, float] = dict(provenance.get("framework_stage_s", {}))
            provenance["framework_stage_s"] = stage_s
            for fw_name in extra:
                t0 = time.time()
                with compile_limits(fw_name):
                    built = build_framework_programs(fw_name, device, quick)
                    fw_passes: list[dict[str, tuple[float, float]]] = []

                    def fw_host_pass(fw_name: str = fw_name) -> FrameworkHost:
                        """Time the framework's programs once more; the fit of all passes,
                        put in the host profile."""
                        nonlocal host
                        fw_passes.append(time_framework_programs(built, device, rounds,
                                                                 round_s))
                        bar.step(f"{fw_name} host programs", 1)
                        fitted = fit_framework_passes(built, fw_passes)
                        host = replace(host, frameworks={**host.frameworks, fw_name: fitted})
                        return fitted

                    ffh = fw_host_pass()  # then again after each stage, `passes` in all
                    write_profile(snapshot(False), path)
                    if fw_name in FRAMEWORK_SWEEPS and device == "cpu":
                        curves, curve_raw = framework_curves(
                            fw_name, snapshot(False).device, device, quick, rounds=rounds,
                            round_s=round_s, step=bar.step)
                        classes.update(curves)
                        raw.update(curve_raw)
                        write_profile(snapshot(False), path)
                        probe(f"{fw_name} curves")
                        if len(fw_passes) < passes:
                            ffh = fw_host_pass()
                    if fw_name in RUNTIME_CHAINS and device == "cpu" and cold:
                        if cache.get("stream_share"):  # a shared cache model to start from
                            cache.update(runtime_cache_stage(fw_name, llc_bytes, quick, rounds,
                                                             cache, provenance))
                        bar.step(f"{fw_name} cache probe", 1)
                        write_profile(snapshot(False), path)
                        if len(fw_passes) < passes:
                            ffh = fw_host_pass()
                    while len(fw_passes) < passes:
                        ffh = fw_host_pass()
                    ffh = in_model_stage(snapshot(False), ffh, device, quick, rounds, fw_name,
                                         measured_nets) if device == "cpu" else \
                        in_model(snapshot(False), ffh, device, quick, rounds, fw_name)
                    probe(f"{fw_name} in-model")
                host = replace(host, frameworks={**host.frameworks, fw_name: ffh})
                stage_s[fw_name] = round(time.time() - t0, 1)
                bar.step(f"{fw_name} synthetic networks", 1)
                write_profile(snapshot(False), path)
    except KeyboardInterrupt:
        bar.close()
        if classes or host.frameworks:
            write_profile(snapshot(False), path)
        raise
    bar.close()
    profile = snapshot(True)
    if meter is not None and base is None and meter.seen_s:  # at the machine's typical speed
        typical = meter.typical()
        profile = at_speed(profile, typical.gemm_s, typical.host_s, typical.memory_s)
        profile = refit_profile(profile, measured_nets)  # the terms against these curves
    write_profile(profile, path)
    return profile
