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
4. for each other framework asked for (onnxruntime, torchscript, inductor): for inductor on a
   CPU, dynamo's guard evaluation per tensor and per module, after 0-128 MiB written between
   calls (:mod:`ftmodel.calibration.guards`; a model's guards cost 0.2-1.3 µs each, 1.2 ms a call
   of GhostNet, where a tiny program's are a few µs); chained tiny-op
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

Stages 1-3 are :func:`ftmodel.calibration.eager_stage.eager_stage`, stage 4
:func:`ftmodel.calibration.framework_stage.framework_stage`; both add what they measure to one
:class:`ftmodel.calibration.calibration_run.CalibrationRun`, and after every stage the profile
so far is written atomically to ``out``, so an interrupted run keeps what it measured
(``provenance.complete`` is false and the missing op classes are listed).

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
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from ftmodel.calibration.allocator import mmap_threshold_stale, page_fault_probe_stale
from ftmodel.calibration.calibration_run import CalibrationRun
from ftmodel.calibration.dispatch import host_programs
from ftmodel.calibration.eager_stage import (eager_stage, mmap_threshold_stage, page_fault_stage,
                                             pool_window_stage)
from ftmodel.calibration.framework_ops import framework_curve_steps
from ftmodel.calibration.framework_stage import framework_stage
from ftmodel.calibration.in_model_cpu import refit_profile
from ftmodel.calibration.ops import CPU_GRID, GPU_GRID, op_samples
from ftmodel.calibration.planes import plane_samples
from ftmodel.calibration.windows import window_samples, windows_stale
from ftmodel.calibration.progress import CalibrationProgress
from ftmodel.calibration.runtime_timing import RUNTIME_CHAINS
from ftmodel.calibration.speed_probe import speed_meter_for
from ftmodel.calibration.update import kept_for_update, profile_to_update
from ftmodel.errors import BackendUnavailable, InvalidArgumentError
from ftmodel.frameworks.base import canonical_framework, framework_names, get_framework
from ftmodel.hardware.profile import HardwareProfile, HostProfile, write_profile
from ftmodel.hardware.registry import default_profile_path
from ftmodel.hardware.rescale import at_speed
from ftmodel.measure import (allocator_setting, cache_flusher, cpu_identity, cpu_name, keep_heap,
                             last_level_cache_bytes, set_threads)
from ftmodel.speed import speed_normalised

__all__ = ["DEFAULT_PASSES", "calibrate"]

# How many times a full calibration times its op sweeps (the median of each sample's passes)
DEFAULT_PASSES = 3


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
            and not (device == "cpu" and (page_fault_probe_stale(base.host, base.provenance)
                                          or mmap_threshold_stale(base.host)
                                          or windows_stale(base.device)))):
        raise InvalidArgumentError(
            "--update re-measures frameworks other than eager (and an outdated page-fault "
            "price, heap probe or pool curves) into an existing profile, and none was named "
            f"(frameworks: {', '.join(fws)}); name one, e.g. --frameworks inductor, or "
            "calibrate afresh to re-measure eager")
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
    windows = window_samples(quick) if device == "cpu" and (
        base is None or windows_stale(base.device)) else []
    extra = [f for f in fws if f != "eager"]
    total = (0 if base else passes * (len(programs) + sum(len(v) for v in sweeps.values())) + 2
             + len(planes)) + len(windows) \
        + (passes + 1) * len(extra) + framework_curve_steps(extra, device) \
        + sum(device == "cpu" and cold for f in extra if f in RUNTIME_CHAINS) \
        + (device == "cpu" and "inductor" in extra) \
        + (device == "cpu" and (base is None
                                or page_fault_probe_stale(base.host, base.provenance))) \
        + (device == "cpu" and (base is None or mmap_threshold_stale(base.host)))
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
    llc_bytes = last_level_cache_bytes(device)
    provenance["last_level_cache_bytes"] = llc_bytes
    run = CalibrationRun(device=device, path=path, name=name, dev_name=dev_name, quick=quick,
                         rounds=rounds, round_s=round_s, passes=passes, cold=cold,
                         llc_bytes=llc_bytes,
                         flush=cache_flusher(device, llc_bytes) if cold else None, bar=bar,
                         meter=speed_meter_for(device, base), provenance=provenance,
                         host=host, started=started)
    if base is not None:  # the profile's other parts, its probes and its duration go on
        kept = kept_for_update(base, extra, provenance)
        run = replace(run, classes=kept.classes, raw=kept.raw, cache=kept.cache,
                      host=kept.host, provenance=kept.provenance,
                      started=time.time() - kept.duration_s)
    try:
        with torch.no_grad(), speed_normalised(run.meter):
            run.probe("start")
            if base is None:  # the eager host part and the shared device half
                eager_stage(run, programs, sweeps, planes, windows)
            elif windows:  # a profile made before pools had per-window curves
                pool_window_stage(run, windows)
            if device == "cpu" and page_fault_probe_stale(run.host, run.provenance):  # older
                page_fault_stage(run)
                run.write()
            if device == "cpu" and base is not None and mmap_threshold_stale(run.host):
                mmap_threshold_stage(run)
                run.write()
            run.provenance["framework_stage_s"] = dict(
                run.provenance.get("framework_stage_s", {}))
            for fw_name in extra:
                framework_stage(run, fw_name)
    except KeyboardInterrupt:
        bar.close()
        if run.classes or run.host.frameworks:
            run.write()
        raise
    bar.close()
    profile = run.snapshot(True)
    if run.meter is not None and base is None and run.meter.seen_s:  # the typical speed
        typical = run.meter.typical()
        profile = at_speed(profile, typical.gemm_s, typical.host_s, typical.memory_s)
        profile = refit_profile(profile, run.measured_nets)  # the terms against these curves
    write_profile(profile, path)
    return profile
