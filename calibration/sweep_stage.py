"""The op-sweep stage of calibration: time single-op samples, turn them into device curves.

On a CPU a sample's device time is its time minus its family's floor (the same call on a few
elements, or a plain ReLU for the transcendental families, ``calibration.ops.MATH_FAMILIES``:
host cost); on a GPU it is the time of one call inside a replayed CUDA graph of
repeated calls (:func:`ftmodel.measure.captured_repeats`), which has no host cost. See
:mod:`ftmodel.calibration.suite` for where the stage sits.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from ftmodel.calibration.op_sample import OpSample
from ftmodel.calibration.ops import PER_OP_CLASSES, VARIANT_CURVE_CLASSES
from ftmodel.frameworks import eager
from ftmodel.hardware.profile import OpClassData
from ftmodel.estimate.curves import PER_CALL
from ftmodel.estimate.kernels import op_name
from ftmodel.program import Program
from ftmodel.tracing.rnn_variants import steps_of
from ftmodel.measure import (Measurement, captured_repeats, measure_cold_interleaved,
                             measure_interleaved)
from ftmodel.speed import gemm_share
from ftmodel.tracing.dispatch import trace

__all__ = ["ClassTimes", "to_device", "caller", "measure_group", "measure_class", "as_timed",
           "median_of_passes", "class_stage", "class_curves", "grouped_curves", "subset_curve",
           "per_op_curves", "per_call_curve", "derived_curves"]


def to_device(module: nn.Module, inputs: Sequence[torch.Tensor], device: str
        ) -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    return module.to(device).eval(), tuple(t.to(device) for t in inputs)


def caller(module: nn.Module, inputs: tuple[torch.Tensor, ...]) -> Callable[[], object]:
    def call() -> object:
        with torch.no_grad():
            return module(*inputs)
    return call


def _measurements(items: Sequence[tuple[str, nn.Module, tuple[torch.Tensor, ...]]],
                  device: str, rounds: int, round_s: float,
                  host_share: Mapping[str, float] | None = None,
                  gemm_share: Mapping[str, float] | None = None) -> dict[str, Measurement]:
    fns = {}
    for label, module, inputs in items:
        m, xs = to_device(module, inputs, device)
        fns[label] = caller(m, xs)
    res = measure_interleaved(fns, device=device, rounds=rounds, round_s=round_s,
                              host_share=host_share, gemm_share=gemm_share)
    return {str(k): v for k, v in res.items()}


def measure_group(items: Sequence[tuple[str, nn.Module, tuple[torch.Tensor, ...]]],
                  device: str, rounds: int, round_s: float,
                  host_share: Mapping[str, float] | None = None,
                  gemm_share: Mapping[str, float] | None = None
                  ) -> dict[str, tuple[float, float]]:
    """(time, spread) of each labelled module called on its inputs, timed interleaved
    (``host_share``, ``gemm_share``: see :func:`ftmodel.measure.measure_interleaved`)."""
    return {k: (v.time_s, v.spread) for k, v in
            _measurements(items, device, rounds, round_s, host_share, gemm_share).items()}


def as_timed(m: Measurement) -> tuple[float, ...]:
    """What a measurement's time at the nominal speed was made from, unscaled: its fastest
    round's median as timed, then the fastest reference GEMM, memory and host reference around
    its rounds (seconds; 0 for a reference not timed), each to 4 significant digits; ``()``
    without references. With these a profile's samples can be scaled again by another speed
    model without timing anything."""
    if not m.references or not m.timed_round_s:
        return ()
    refs = [r for ab in m.references for r in ab]
    memory = [r.memory_s for r in refs if r.memory_s]
    host = [r.host_s for r in refs if r.host_s]
    values = (min(m.timed_round_s), min(r.gemm_s for r in refs),
              min(memory) if memory else 0.0, min(host) if host else 0.0)
    return tuple(float(f"{v:.4g}") for v in values)


def _measure_captured(samples: list[OpSample], device: str, rounds: int, round_s: float
                      ) -> dict[str, tuple[float, float]]:
    """On a GPU: each sample's device seconds per call from replays of a CUDA graph of repeated
    calls (:func:`ftmodel.measure.captured_repeats`: no host cost, so no floor to subtract);
    floors are timed as plain calls (host cost, which the cold measurement subtracts)."""
    fns: dict[str, Callable[[], object]] = {}
    reps: dict[str, int] = {}
    for s in samples:
        m, xs = to_device(s.module, s.inputs, device)
        fns[s.label], reps[s.label] = (caller(m, xs), 1) if s.is_floor else \
            captured_repeats(caller(m, xs), device)
    res = measure_interleaved(fns, device=device, rounds=rounds, round_s=round_s)
    out = {str(k): (v.time_s / reps[str(k)], v.spread) for k, v in res.items()}
    del fns  # the graphs and their memory pools
    torch.cuda.empty_cache()
    return out


@dataclass(frozen=True)
class ClassTimes:
    """One pass over a curve's samples: each label's (seconds, round-to-round spread) timed hot,
    and its seconds right after a cache flush (empty without a flush); ``timed``: each hot
    label's unscaled fastest round and references (:func:`as_timed`; empty where no speed
    meter was in force)."""

    hot: Mapping[str, tuple[float, float]]
    cold: Mapping[str, float]
    timed: Mapping[str, tuple[float, ...]] = field(default_factory=dict)


def _short_labels(samples: Sequence[OpSample], device: str) -> dict[str, str]:
    return {s.label: f"{s.label} short" for s in samples
            if s.short_inputs and not device.startswith("cuda")}


def measure_class(samples: list[OpSample], device: str, rounds: int, round_s: float,
                  flush: Callable[[], object] | None = None) -> ClassTimes:
    """Time one curve's samples once (floors included): interleaved hot rounds, and with
    ``flush`` cold rounds (see :func:`class_stage`); on a CPU each scaled to the speed meter's
    nominal speed by its op class's blend of the GEMM and memory references
    (:func:`ftmodel.speed.gemm_share`)."""
    shorts = _short_labels(samples, device)
    shares = {s.label: gemm_share(s.op_class) for s in samples}
    shares.update({shorts[s.label]: shares[s.label] for s in samples if s.label in shorts})
    timed: dict[str, tuple[float, ...]] = {}
    if device.startswith("cuda"):  # asynchronous: device time observed directly
        hot = _measure_captured(samples, device, rounds, round_s)
    else:
        res = _measurements([(s.label, s.module, s.inputs) for s in samples]
                            + [(shorts[s.label], s.module, s.short_inputs)
                               for s in samples if s.label in shorts], device, rounds, round_s,
                            gemm_share=shares)
        hot = {k: (v.time_s, v.spread) for k, v in res.items()}
        timed = {k: t for k, v in res.items() if (t := as_timed(v))}
    cold: dict[str, float] = {}
    if flush is not None:
        fns = {}
        for s in samples:
            m, xs = to_device(s.module, s.inputs, device)
            fns[s.label] = caller(m, xs)
        cold = {str(k): v.time_s for k, v in measure_cold_interleaved(
            fns, flush=flush, device=device, rounds=max(2, rounds - 2),
            gemm_share=shares).items()}
    return ClassTimes(hot, cold, timed)


def median_of_passes(passes: Sequence[ClassTimes]) -> ClassTimes:
    """Each label's median over ``passes`` (hot seconds, their spread, cold seconds): a sample
    timed while the machine ran slow in one pass of three is outvoted by the other two."""
    if not passes:
        raise ValueError("no passes to combine")
    if len(passes) == 1:
        return passes[0]
    hot = {k: (statistics.median(p.hot[k][0] for p in passes),
               statistics.median(p.hot[k][1] for p in passes)) for k in passes[0].hot}
    cold = {k: statistics.median(p.cold[k] for p in passes) for k in passes[0].cold}
    return ClassTimes(hot, cold)


def class_stage(samples: list[OpSample], device: str, rounds: int, round_s: float,
                 flush: Callable[[], object] | None = None,
                 host_s: Callable[[Program], float] | None = None
                 ) -> tuple[OpClassData, list[dict[str, Any]], list[str]]:
    """Measure one curve's samples once and make them a curve (:func:`class_curves`)."""
    return class_curves(samples, [measure_class(samples, device, rounds, round_s, flush)],
                        device, host_s)


def class_curves(samples: list[OpSample], passes: Sequence[ClassTimes], device: str,
                 host_s: Callable[[Program], float] | None = None
                 ) -> tuple[OpClassData, list[dict[str, Any]], list[str]]:
    """One curve from its samples' times, the median over ``passes`` (:func:`median_of_passes`;
    each pass's hot time is kept in the raw entry as ``pass_total_s``, and where a speed meter
    was in force what each pass's time was made from, unscaled, as ``pass_timed``,
    ``pass_floor_timed`` and ``pass_short_timed``: :func:`_timed_record`); device time = time −
    the family's floor on a CPU, the time of a captured repeat (:func:`_measure_captured`) on a
    GPU.

    With cold times (a cache flush before each call), each sample's cold device time = cold time
    − cold floor (the flush also chills the host's own code path, which the cold floor carries
    and the subtraction removes).

    A sample with ``short_inputs`` (a fused recurrent layer, on a CPU) is timed over both
    lengths: its row prices one step, the difference of the two times over the difference of
    their steps, and its raw entry holds ``per_call_s``, what the short run took besides its
    steps and the host cost ``host_s`` predicts for its program (the family's floor without
    ``host_s``): :func:`per_call_curve` makes those a curve.
    """
    shorts = _short_labels(samples, device)
    times = median_of_passes(passes)
    measured, cold = times.hot, times.cold
    floors = {s.family: measured[s.label][0] for s in samples if s.is_floor}
    floor_labels = {s.family: s.label for s in samples if s.is_floor}
    cold_floors = {s.family: cold[s.label] for s in samples if s.is_floor and cold}
    rows: list[tuple[float, float, float, float]] = []
    cold_rows: list[float] = []
    variants: list[str] = []
    raw: list[dict[str, Any]] = []
    for s in samples:
        if s.is_floor:
            continue
        prog = eager.lower(trace(s.module, s.inputs))
        main = max((k for k in prog.kernels if k.op_class == s.op_class),
                   key=lambda k: (k.macs, k.bytes_total), default=None)
        if main is None:  # the op lowered to another class on this build; keep it honest
            main = max(prog.kernels, key=lambda k: (k.macs, k.bytes_total))
        total_s, spread = measured[s.label]
        floor_s = 0.0 if device.startswith("cuda") else floors[s.family]
        device_s = max(total_s - floor_s, 1e-9)
        extra: dict[str, Any] = {}
        if s.label in shorts:  # a cost per step and one per call
            short_prog = eager.lower(trace(s.module, s.short_inputs))
            n_long = steps_of(main.variant)[0]
            n_short = max((steps_of(k.variant)[0] for k in short_prog.kernels), default=1)
            short_s = measured[shorts[s.label]][0]
            step_s = max(total_s - short_s, 1e-9) / max(n_long - n_short, 1)
            fixed_host_s = host_s(short_prog) if host_s is not None else floor_s
            extra = {"short_total_s": short_s, "short_steps": n_short,
                     "per_call_s": max(short_s - n_short * step_s - fixed_host_s, 0.0)}
            penalty_s = max(cold[s.label] - cold_floors[s.family] - device_s, 0.0) if cold \
                else 0.0
            device_s = step_s * n_long
        if len(passes) > 1:
            extra["pass_total_s"] = [p.hot[s.label][0] for p in passes]
        extra.update(_timed_record(passes, s.label, floor_labels.get(s.family),
                                   shorts.get(s.label)))
        row, steps = s.curve_row(main, device_s)  # per step on a per-step curve
        rows.append(row)
        variants.append(main.variant if s.op_class in VARIANT_CURVE_CLASSES else "")
        raw.append({"label": s.label, "total_s": total_s, "floor_s": floor_s, "spread": spread,
                    "variant": variants[-1],
                    "op": op_name(main.members[0]) if main.members else "", **extra})
        if cold:
            cold_rows.append((device_s + penalty_s) / steps if "per_call_s" in extra else
                             max(cold[s.label] - cold_floors[s.family], device_s) / steps)
            raw[-1].update(cold_total_s=cold[s.label], cold_floor_s=cold_floors[s.family])
    return (OpClassData(model="samples", samples=tuple(rows), cold_s=tuple(cold_rows)), raw,
            variants)


def _timed_record(passes: Sequence[ClassTimes], label: str, floor: str | None,
                  short: str | None) -> dict[str, Any]:
    """A sample's raw-entry fields from its passes' :func:`as_timed` records, where every pass
    has one: ``pass_timed`` (the sample), ``pass_floor_timed`` (its family's floor) and
    ``pass_short_timed`` (its short twin), each one row per pass."""
    out: dict[str, Any] = {}
    for key, name in (("pass_timed", label), ("pass_floor_timed", floor),
                      ("pass_short_timed", short)):
        if name is not None and all(name in p.timed for p in passes):
            out[key] = [list(p.timed[name]) for p in passes]
    return out


def subset_curve(data: OpClassData, keep: list[int]) -> OpClassData:
    return OpClassData("samples", tuple(data.samples[i] for i in keep),
                       cold_s=tuple(data.cold_s[i] for i in keep) if data.cold_s else ())


def per_call_curve(data: OpClassData, raw: Sequence[dict[str, Any]]) -> OpClassData | None:
    """The per-call curve of a per-step curve's samples timed at two lengths (see
    :func:`class_stage`): each sample's per-step work against its ``per_call_s``; None when
    fewer than 3 samples have one."""
    rows = tuple((m, br, bw, max(float(r["per_call_s"]), 1e-9))
                 for (m, br, bw, _), r in zip(data.samples, raw) if "per_call_s" in r)
    return OpClassData("samples", rows) if len(rows) >= 3 else None


def grouped_curves(prefix: str, data: OpClassData, groups: Sequence[str]
                   ) -> dict[str, OpClassData]:
    """``<prefix><group>`` curves of each group's samples (``groups[i]``: sample ``i``'s), when
    the samples fall in two groups or more; groups "" and those of fewer than 3 samples get
    none."""
    if len(set(groups)) < 2:
        return {}
    out: dict[str, OpClassData] = {}
    for g in sorted(set(groups) - {""}):
        keep = [i for i, x in enumerate(groups) if x == g]
        if len(keep) >= 3:
            out[prefix + g] = subset_curve(data, keep)
    return out


def per_op_curves(op_class: str, data: OpClassData, raw: Sequence[dict[str, Any]]
                  ) -> dict[str, OpClassData]:
    """``<op_class>@<op>`` curves of each op's own samples (``raw[i]["op"]``: the aten op
    of sample ``i``'s kernel), for a class whose samples come from more than one op; ops with
    fewer than 3 samples get none."""
    ops = [str(r.get("op", "")) for r in raw]
    if len(set(ops) - {""}) < 2:
        return {}
    return grouped_curves(f"{op_class}@", data, ops)


def derived_curves(op_class: str, data: OpClassData, raw: Sequence[dict[str, Any]]
                   ) -> dict[str, OpClassData]:
    """The curves a measured class adds besides its own: one per op (:data:`PER_OP_CLASSES`,
    :func:`per_op_curves`) and the per-call curve of fused layers (:func:`per_call_curve`)."""
    out = per_op_curves(op_class, data, raw) if op_class in PER_OP_CLASSES else {}
    call = per_call_curve(data, raw)
    if call is not None:  # a fused layer's cost per call, besides its steps
        out[op_class + PER_CALL] = call
    return out
