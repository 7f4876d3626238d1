"""The in-model stage on a CPU: how op costs add up inside whole (random, synthetic) networks.

Each of :func:`ftmodel.calibration.networks.synthetic_networks` is run at a few batch sizes
through the framework being calibrated, measured in interleaved rounds under the speed meter,
and :func:`~ftmodel.calibration.networks.fit_in_model` fits the framework's in-model terms to
the measured times against the predicted host and device times (on a GPU:
:mod:`ftmodel.calibration.in_model_gpu`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from ftmodel.api import Predictor
from ftmodel.calibration.framework_ops import FRAMEWORK_SWEEPS
from ftmodel.calibration.networks import DEVICE_SCALED_FORMS, fit_in_model, synthetic_networks
from ftmodel.calibration.sweep_stage import caller
from ftmodel.errors import FrameworkUnsupported
from ftmodel.frameworks import eager
from ftmodel.hardware.profile import FrameworkHost, HardwareProfile
from ftmodel.measure import heap_kept, measure_interleaved
from ftmodel.program import Program
from ftmodel.tracing.dispatch import trace

__all__ = ["InModelNetworks", "fit_in_model_stage", "in_model_networks", "in_model_stage",
           "measure_in_model"]

Key = tuple[str, int]  # (network, batch)


@dataclass(frozen=True)
class InModelNetworks:
    """The in-model stage's synthetic networks, built once: each (network, batch)'s program as
    the framework lowers it and a callable running it."""

    framework: str
    programs: dict[Key, Program]
    fns: dict[Key, Callable[[], object]]
    settle_s: float


def _predictor(partial: HardwareProfile, framework: str) -> Predictor:
    # the networks are measured in this process: with the heap kept unless --default-malloc
    return Predictor(framework, partial, heap="kept" if heap_kept() else "plain")


def in_model_networks(partial: HardwareProfile, device: str, quick: bool,
                      framework: str = "eager") -> InModelNetworks:
    """Build and lower the stage's networks (those the framework cannot run are left out)."""
    fw = _predictor(partial, framework).framework
    # inductor compiles every network × batch (1-3 s each): two batches, but all 18 networks
    # (6 small ones left its device scale to a few host-bound points: 0.83 against eager's 1.12)
    nets = synthetic_networks(6 if quick else 18)
    batches = (1, 8) if quick or framework == "inductor" else (1, 4, 16, 64)
    fns: dict[Key, Callable[[], object]] = {}
    programs: dict[Key, Program] = {}
    for net in nets:
        for b in batches:
            if fw.runner is None:  # eager: the module itself
                inputs = tuple(t.to(device) for t in net.make_inputs(b))
                fns[(net.name, b)] = caller(net.module.to(device), inputs)
                programs[(net.name, b)] = eager.lower(trace(net.module, net.make_inputs(b)))
            else:
                xs = net.make_inputs(b)
                try:
                    programs[(net.name, b)] = fw.program(net.module, xs, b, trace(net.module, xs),
                                                         device=partial.device.type, dtype="fp32")
                    fns[(net.name, b)] = fw.runner(net.module, xs, b,
                                                   device=partial.device.type, dtype="fp32")
                except FrameworkUnsupported:
                    continue
    return InModelNetworks(framework, programs, fns, fw.settle_s)


def _rows(nets: InModelNetworks, partial: HardwareProfile
          ) -> list[tuple[Key, float, float, float, int]]:
    """(key, predicted host s, predicted device s, bytes, Python launches) of each network."""
    predictor = _predictor(partial, nets.framework)
    rows = []
    for key, prog in nets.programs.items():
        tl = predictor.program_timeline(prog)
        # host side as predicted, per-call cost included (0 for eager)
        rows.append((key, tl.overhead_s, tl.compute_s,
                     float(sum(k.bytes_total for k in prog.kernels)), prog.n_python_launches))
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


def fit_in_model_stage(partial: HardwareProfile, fh: FrameworkHost, nets: InModelNetworks,
                       passes: Sequence[Mapping[Key, float]]) -> FrameworkHost:
    """Fit the framework's in-model terms to the networks' times, each network's the median of
    its measurements in ``passes`` (one per pass over the op sweeps: like the sweep's samples,
    measured at several moments of the calibration, as a VM's speed moves by the minute; with
    more than one, each pass's time is kept in the sample as ``pass_time_s``)."""
    rows = _rows(nets, partial)
    measured = {r[0]: float(np.median([p[r[0]] for p in passes])) for r in rows}
    sweep = FRAMEWORK_SWEEPS.get(nets.framework)
    forms = ("n",) if sweep is not None and sweep.in_session_curves else DEVICE_SCALED_FORMS
    coef = fit_in_model([r[1] for r in rows], [r[2] for r in rows], [r[3] for r in rows],
                        [r[4] for r in rows], [measured[r[0]] for r in rows],
                        groups=[r[0][0] for r in rows], forms=forms)
    samples = tuple(fh.samples) + tuple(
        {"network": f"{r[0][0]}@b{r[0][1]}", "host_s": r[1], "device_s": r[2],
         "bytes": r[3], "n_kernels": r[4], "time_s": measured[r[0]],
         **({"pass_time_s": [p[r[0]] for p in passes]} if len(passes) > 1 else {})}
        for r in rows)
    return FrameworkHost(fh.per_event_s, fh.per_call_s, samples, coef)


def in_model_stage(partial: HardwareProfile, fh: FrameworkHost, device: str, quick: bool,
                   rounds: int, framework: str = "eager") -> FrameworkHost:
    """Fit how op costs add up inside whole (random, synthetic) networks, measured once."""
    nets = in_model_networks(partial, device, quick, framework)
    return fit_in_model_stage(partial, fh, nets, [measure_in_model(nets, partial, device,
                                                                   rounds)])
