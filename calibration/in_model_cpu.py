"""The in-model stage on a CPU: how op costs add up inside whole (random, synthetic) networks.

Each of :func:`ftmodel.calibration.networks.synthetic_networks` is run at a few batch sizes
through the framework being calibrated, measured in interleaved rounds under the speed meter,
and :func:`~ftmodel.calibration.networks.fit_in_model` fits the framework's in-model terms to
the measured times against the predicted host and device times (on a GPU:
:mod:`ftmodel.calibration.in_model_gpu`).

The networks are timed once per pass: eager's at the end of every pass over the op sweeps,
each network's time the median over the passes, as each op sample's is (a slow pass slows the
samples and the networks of that pass alike). Another framework's at the end of every one of its
host passes, around its own curves, which are timed once: there each network's time is the
median over the passes that agree with the fastest (:func:`kept_passes`): within
:data:`PASS_AGREEMENT` of its speed, a pass's speed being the median over the networks of its
time against theirs over all passes. Interference only slows a pass down, and networks timed in
a slow stretch after the curves describe a machine the curves never saw: TorchScript's networks
in calibration 122 of the 2-vCPU AMD EPYC Zen 5 guest ran their passes at 0.89, 1.00 and 1.09
of their medians (6 of the 25 stages of that guest's calibrations 113-123 had passes more than
10% apart), and the median of the three fitted its kernels without MACs at 1.99x; fitted to the
first pass alone, its tuning half came out at 21.8% median APE instead of 27.7%. Where passes
are left out, up to :data:`EXTRA_PASSES` more are timed (:func:`measure_until_agreed`), in case
the machine comes back (calibration 124: passes at 0.93, 1.00 and 1.07, two more at 1.00, the
tuning half at 14.1% where the median of the first three gave 15.7%). Eager's slow passes are
kept: left out, two calibrations' tuning halves came out 0.1 and 0.8 points worse.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np

from ftmodel.api import Predictor
from ftmodel.calibration.framework_ops import FRAMEWORK_SWEEPS
from ftmodel.calibration.networks import (DEVICE_SCALED_FORMS, SyntheticNet, fit_in_model,
                                         synthetic_networks)
from ftmodel.calibration.sweep_stage import caller
from ftmodel.errors import FrameworkUnsupported
from ftmodel.estimate.timeline import kernel_kinds
from ftmodel.frameworks import eager
from ftmodel.frameworks.base import Framework
from ftmodel.hardware.profile import FrameworkHost, HardwareProfile
from ftmodel.measure import heap_kept, measure_interleaved
from ftmodel.program import Program
from ftmodel.tracing.dispatch import trace
from ftmodel.tracing.variants import backend_threads

__all__ = ["EXTRA_PASSES", "InModelNetworks", "Key", "PASS_AGREEMENT", "fit_in_model_stage",
           "in_model_networks", "kept_passes", "measure_in_model", "measure_until_agreed",
           "pass_speeds", "passes_record", "refit_in_model", "refit_profile"]

Key = tuple[str, int]  # (network, batch)
# passes of the networks slower than the fastest by more than this share are left out of the
# fit; while the passes differ by more, up to EXTRA_PASSES more are timed
PASS_AGREEMENT = 0.10
EXTRA_PASSES = 2


@dataclass(frozen=True)
class InModelNetworks:
    """The in-model stage's synthetic networks, built once: each (network, batch)'s program as
    the framework lowers it and a callable running it."""

    framework: str
    programs: dict[Key, Program]
    fns: dict[Key, Callable[[], object]]
    settle_s: float


def _predictor(partial: HardwareProfile, framework: str, heap: str | None = None
               ) -> Predictor:
    # the networks are measured in this process: with the heap kept unless --default-malloc
    return Predictor(framework, partial,
                     heap=heap if heap is not None else "kept" if heap_kept() else "plain")


def in_model_networks(partial: HardwareProfile, device: str, quick: bool,
                      framework: str = "eager") -> InModelNetworks:
    """Build and lower the stage's networks (those the framework cannot run are left out)."""
    predictor = _predictor(partial, framework)
    fw = predictor.framework
    # inductor compiles every network × batch (1-3 s each): two batches, but all 18 networks
    # (6 small ones left its device scale to a few host-bound points: 0.83 against eager's 1.12)
    nets = synthetic_networks(6 if quick else 18)
    batches = (1, 8) if quick or framework == "inductor" else (1, 4, 16, 64)
    fns: dict[Key, Callable[[], object]] = {}
    programs: dict[Key, Program] = {}
    for net in nets:
        for b in batches:
            # convolution backends as selected with the profile's threads (Predictor.threads)
            with backend_threads(predictor.threads):
                _build(net, b, device, partial, fw, fns, programs)
    return InModelNetworks(framework, programs, fns, fw.settle_s)


def _build(net: SyntheticNet, b: int, device: str, partial: HardwareProfile, fw: Framework,
           fns: dict[Key, Callable[[], object]], programs: dict[Key, Program]) -> None:
    """Lower network ``net`` at batch ``b`` into ``programs`` and its runner into ``fns``
    (neither where the framework cannot run it)."""
    key = (net.name, b)
    if fw.runner is None:  # eager: the module itself
        inputs = tuple(t.to(device) for t in net.make_inputs(b))
        fns[key] = caller(net.module.to(device), inputs)
        programs[key] = eager.lower(trace(net.module, net.make_inputs(b)))
        return
    xs = net.make_inputs(b)
    try:
        # the runner first: the artifact it builds also serves the lowering
        fns[key] = fw.runner(net.module, xs, b, device=partial.device.type, dtype="fp32")
        programs[key] = fw.program(net.module, xs, b, trace(net.module, xs),
                                   device=partial.device.type, dtype="fp32")
    except FrameworkUnsupported:
        programs.pop(key, None)
        fns.pop(key, None)


Row = tuple[Key, float, float, float, int, tuple[float, float, float]]


def _by_kind(prog: Program, device_s: np.ndarray) -> tuple[float, float, float]:
    """Device seconds of the program's convolutions, other MAC kernels and kernels without
    MACs (:func:`ftmodel.estimate.timeline.kernel_kinds`)."""
    conv, mac, other = np.bincount(kernel_kinds(prog.kernels), weights=device_s, minlength=3)
    return float(conv), float(mac), float(other)


def _rows(nets: InModelNetworks, partial: HardwareProfile, heap: str | None = None
          ) -> list[Row]:
    """(key, predicted host s, predicted device s, bytes, Python launches, device s by kind)
    of each network, in the heap state ``heap`` (by default this process's)."""
    predictor = _predictor(partial, nets.framework, heap)
    rows = []
    for key, prog in nets.programs.items():
        tl = predictor.program_timeline(prog)
        # host side as predicted, per-call cost included (0 for eager)
        rows.append((key, tl.overhead_s, tl.compute_s,
                     float(sum(k.bytes_total for k in prog.kernels)), prog.n_python_launches,
                     _by_kind(prog, tl.device_s)))
    return rows


def measure_in_model(nets: InModelNetworks, partial: HardwareProfile, device: str,
                     rounds: int) -> dict[Key, float]:
    """One measurement of every network (interleaved rounds under the speed meter), seconds."""
    # each network's host work follows the meter's host reference, its kernels the GEMM
    shares = {r[0]: r[1] / (r[1] + r[2]) if r[1] + r[2] > 0 else 0.0
              for r in _rows(nets, partial)}
    measured = measure_interleaved(nets.fns, device=device, rounds=rounds, round_s=0.05,
                                   max_reps=30, settle_s=nets.settle_s, host_share=shares)
    return {k: m.time_s for k, m in measured.items()}


def pass_speeds(passes: Sequence[Mapping[Key, float]]) -> list[float]:
    """Each pass's time relative to the others: the median over the networks of the pass's time
    over that network's median over all ``passes`` (1.0: a typical pass; above: slower)."""
    keys = [k for k in passes[0] if all(k in p for p in passes)] if passes else []
    medians = {k: float(np.median([p[k] for p in passes])) for k in keys}
    keys = [k for k in keys if medians[k] > 0]
    if not keys:
        return [1.0] * len(passes)
    return [float(np.median([p[k] / medians[k] for k in keys])) for p in passes]


def kept_passes(passes: Sequence[Mapping[Key, float]]) -> list[int]:
    """The indices of the ``passes`` whose speed (:func:`pass_speeds`) is within
    :data:`PASS_AGREEMENT` of the fastest pass's."""
    speeds = pass_speeds(passes)
    fastest = min(speeds, default=1.0)
    return [i for i, v in enumerate(speeds) if v <= fastest * (1.0 + PASS_AGREEMENT)]


def measure_until_agreed(measure: Callable[[], dict[Key, float]],
                         passes: list[dict[Key, float]],
                         extra: int = EXTRA_PASSES) -> int:
    """While :func:`kept_passes` keeps fewer of ``passes`` than were given, append another pass
    (``measure()``), at most ``extra`` of them; returns how many were added."""
    added, wanted = 0, len(passes)
    while added < extra and len(kept_passes(passes)) < wanted:
        passes.append(measure())
        added += 1
    return added


def passes_record(passes: Sequence[Mapping[Key, float]], kept: Sequence[int]
                  ) -> dict[str, list[float] | list[int]]:
    """What the provenance keeps of a stage's network passes: each pass's speed
    (:func:`pass_speeds`, rounded) and the passes fitted (``kept``)."""
    return {"speeds": [round(v, 4) for v in pass_speeds(passes)], "kept": list(kept)}


def _network(key: Key) -> str:
    return f"{key[0]}@b{key[1]}"


def _fitted(fh: FrameworkHost, nets: InModelNetworks,
            rows: Sequence[Row], measured: Mapping[Key, float],
            pass_times: Mapping[Key, Sequence[float]]) -> FrameworkHost:
    """``fh`` with the in-model terms fitted to ``measured`` against ``rows``' predicted times
    and one network sample per row added (``pass_time_s`` where a row has several)."""
    sweep = FRAMEWORK_SWEEPS.get(nets.framework)
    forms = ("n",) if sweep is not None and sweep.in_session_curves else DEVICE_SCALED_FORMS
    coef = fit_in_model([r[1] for r in rows], [r[2] for r in rows], [r[3] for r in rows],
                        [r[4] for r in rows], [measured[r[0]] for r in rows],
                        groups=[r[0][0] for r in rows], forms=forms,
                        device_by_kind=([r[5][0] for r in rows], [r[5][1] for r in rows],
                                        [r[5][2] for r in rows]))
    samples = tuple(fh.samples) + tuple(
        {"network": _network(r[0]), "host_s": r[1], "device_s": r[2],
         "device_by_kind_s": list(r[5]),
         "bytes": r[3], "n_kernels": r[4], "time_s": measured[r[0]],
         **({"pass_time_s": list(pass_times[r[0]])} if len(pass_times.get(r[0], ())) > 1
            else {})}
        for r in rows)
    return replace(fh, samples=samples, in_model=coef)


def fit_in_model_stage(partial: HardwareProfile, fh: FrameworkHost, nets: InModelNetworks,
                       passes: Sequence[Mapping[Key, float]],
                       kept: Sequence[int] | None = None) -> FrameworkHost:
    """Fit the framework's in-model terms to the networks' times, each network's the median of
    its measurements in ``passes`` (one per pass over the op sweeps: like the sweep's samples,
    measured at several moments of the calibration, as a VM's speed moves by the minute), of
    the passes ``kept`` only where given (:func:`kept_passes`). With more than one pass, each
    pass's time is kept in the sample as ``pass_time_s``, those left out too."""
    rows = _rows(nets, partial)
    fitted = [passes[i] for i in (range(len(passes)) if kept is None else kept)]
    measured = {r[0]: float(np.median([p[r[0]] for p in fitted])) for r in rows}
    return _fitted(fh, nets, rows, measured, {r[0]: [p[r[0]] for p in passes] for r in rows})


def refit_in_model(profile: HardwareProfile, nets: InModelNetworks) -> FrameworkHost:
    """The framework's in-model terms fitted again to the network times ``profile`` records,
    against the host and device times ``profile`` itself predicts for those networks.

    A calibration fits the terms while it measures, against its curves as they were then
    (expressed at the speed of its first seconds); at its end it re-expresses the whole profile
    at the machine's typical speed (:func:`ftmodel.hardware.rescale.at_speed`), which moves each
    op class's curve by its own blend of the GEMM and memory references, but a network's
    recorded time and the dimensionless ``device_scale`` by the GEMM's alone. The terms fitted
    during the run then describe curves the profile no longer has: two fresh calibrations of
    one Zen 2 guest, whose memory reference moved 1.5x and 0.63x between their first seconds and
    their medians, recorded device scales of 1.08 and 0.96; fitted again against their written
    curves, 1.01 and 1.00. The networks are priced in the heap state the profile records for its
    measurements (``provenance.allocator``). Networks of ``nets`` the profile has no time for are
    left out (a profile written by older code); with none in common this raises
    ``ValueError``."""
    fw = nets.framework
    fh = profile.host.frameworks[fw]
    recorded = {str(s["network"]): s for s in fh.samples if "network" in s}
    bare = replace(profile, host=replace(profile.host, frameworks={
        **profile.host.frameworks, fw: replace(fh, in_model={})}))
    # priced in the heap state the networks were measured in, which the profile records
    heap = "kept" if profile.provenance.get("allocator") == "heap kept" else "plain"
    rows = [r for r in _rows(nets, bare, heap) if _network(r[0]) in recorded]
    if not rows:
        raise ValueError(f"the {fw} host part of profile {profile.name!r} records no time for "
                         "any of the in-model networks; nothing to fit again")
    measured = {r[0]: float(recorded[_network(r[0])]["time_s"]) for r in rows}
    pass_times = {r[0]: [float(t) for t in recorded[_network(r[0])].get("pass_time_s", [])]
                  for r in rows}
    kept = replace(fh, samples=tuple(s for s in fh.samples if "network" not in s))
    return _fitted(kept, nets, rows, measured, pass_times)


def refit_profile(profile: HardwareProfile, nets: Mapping[str, InModelNetworks]
                  ) -> HardwareProfile:
    """``profile`` with the in-model terms of each framework in ``nets`` fitted again against
    its own curves (:func:`refit_in_model`)."""
    if profile.host is None or not nets:
        return profile
    return replace(profile, host=replace(profile.host, frameworks={
        **profile.host.frameworks, **{fw: refit_in_model(profile, n) for fw, n in nets.items()}}))
