"""The machine's speed in a corpus run: the measured times at the calibration's speed, and the
predictions at the speed probed before each measurement (``speed="now"``).

Used by ``benchmarks/corpus.py``. Two ways to take a shared VM's change of speed out of the
comparison, which answer different questions:

* *at calibration speed* (:func:`at_calibration_speed`): each measured round re-expressed at the
  calibration's nominal speed by the references timed around it in the measuring process. Not a
  prediction (it uses readings taken during the measurement); it shows what the profile's model
  gets right once the machine's speed is known exactly.
* *speed probed before measuring* (:func:`predict_at_probes`): before each model's measuring
  process, :func:`ftmodel.current_speed.probe_speed` (what ``speed="now"`` runs, about one
  second), then the prediction re-expressed at that probe
  (:func:`ftmodel.current_speed.at_current_speed`) and compared with the process's time: what a
  user who predicts with ``speed="now"`` and then measures gets.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from ftmodel.api import Predictor
from ftmodel.current_speed import at_current_speed
from ftmodel.errors import FtmodelError
from ftmodel.speed import (MEMORY_REFERENCE_BYTES, REFERENCE_SHAPE, Reference, blended,
                           nominal_host_reference_s, nominal_memory_reference_s,
                           nominal_reference_s)
from ftmodel.tools.corpus import get_corpus_model

NOW_LABEL = "speed probed before measuring"


def at_calibration_speed(m: dict[str, Any], nominal_s: float | None,
                         nominal_host_s: float | None = None,
                         host_share: float = 0.0,
                         device_exponent: float = 1.0) -> float | None:
    """One process's time of a point at the calibration's machine speed: each round's median
    scaled by ``nominal / reference`` (the references timed around the round) to the power
    ``device_exponent`` (the profile's, ``ftmodel.speed.device_speed_exponent``; the host
    reference's factor, in proportion, for the ``host_share`` of the time the prediction puts
    on the host, when the calibration and the process both timed it), fastest round; None
    without a nominal speed or references."""
    refs = m.get("round_references_s")
    if nominal_s is None or not refs or len(refs) != len(m["round_medians_s"]) + 1:
        return None
    host_refs = m.get("round_host_references_s")
    blend = nominal_host_s is not None and host_refs and len(host_refs) == len(refs)
    out = []
    for i, t in enumerate(m["round_medians_s"]):
        factor = (nominal_s / float(np.sqrt(refs[i] * refs[i + 1]))) ** device_exponent
        if blend:
            host = nominal_host_s / float(np.sqrt(host_refs[i] * host_refs[i + 1]))
            factor = blended(factor, host, host_share)
        out.append(t * factor)
    return min(out)


def at_speed_rows(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows again, measured at the calibration's speed, as a heap setting of their own
    (``"<heap>, at calibration speed"``) for the summary's tables; none without that time."""
    out = []
    for r in rows:
        t = float(r.get("measured_at_speed_s", np.nan))
        if np.isfinite(t) and t > 0:
            out.append({**r, "heap": f"{r['heap']}, at calibration speed", "measured_s": t,
                        "ratio": r["predicted_s"] / t,
                        "ape": abs(r["predicted_s"] - t) / t})
    return out


def speed_line(probes: Sequence[float], profile: Any) -> str:
    """The reference GEMM's times during the run beside its calibration's."""
    seen = [float(p["s"]) for p in getattr(profile, "provenance", {}).get("reference_probe", [])]
    cal = (f"; its calibration: {', '.join(f'{t * 1e3:.2f}' for t in seen)} ms" if seen
           else "")
    shape = " x ".join(map(str, REFERENCE_SHAPE))
    return (f"- machine speed: the calibration's reference GEMM ({shape}, "
            f"fp32) took {', '.join(f'{t * 1e3:.2f}' for t in probes)} ms before each pass and "
            f"after the last{cal}")


def memory_line(rows: Sequence[dict[str, Any]], profile: Any) -> str:
    """The memory reference's times during the run (its rounds) beside its calibration's."""
    seen = [float(r["memory_reference_s"]) for r in rows
            if np.isfinite(r.get("memory_reference_s", np.nan))]
    if not seen:
        return "- memory speed: not recorded (measured without the memory reference)"
    cal = nominal_memory_reference_s(getattr(profile, "provenance", {}))
    return (f"- memory speed: the memory reference ({MEMORY_REFERENCE_BYTES >> 20} MiB copied, "
            f"`ftmodel.speed.reference_memory`) took a median {np.median(seen) * 1e3:.3f} ms over "
            f"the points (P10 {np.percentile(seen, 10) * 1e3:.3f}, P90 "
            f"{np.percentile(seen, 90) * 1e3:.3f})"
            + (f"; over its calibration, {cal * 1e3:.3f} ms" if cal is not None else
               "; its calibration did not time it"))


def latencies_at(framework: str, profiles: Sequence[Any], heap: str, model: torch.nn.Module,
                 batches: Sequence[int], inputs: Any, host: Any = None) -> list[list[float]]:
    """Predicted seconds of ``model`` at each batch under each of ``profiles`` (one CPU
    profile at several speeds): traced and lowered once, with the first profile, and priced
    with each (:meth:`ftmodel.api.Predictor.prediction`; a CPU lowering does not depend on the
    profile's times)."""
    base = Predictor(framework, profiles[0], host=host, heap=heap)
    programs = {b: base.lower(model, inputs, b, base.trace(model, inputs, b)) for b in batches}
    out = []
    for i, prof in enumerate(profiles):
        pred = base if i == 0 else Predictor(framework, prof, host=host, heap=heap)
        out.append([pred.prediction(programs[b], pred.kernel_arrays(programs[b].kernels), b,
                                    None).latency_s for b in batches])
    return out


def predict_at_probes(framework: str, profile: Any, batches: Sequence[int],
                      probes: Mapping[tuple[str, str], Sequence[Reference]]
                      ) -> dict[tuple[str, str, int], list[float]]:
    """(model, heap, batch) -> the predicted seconds at each probe of that model and heap
    setting (one per measuring process, in order); a model whose prediction fails is left out
    (its failure is reported with the predictions at the profile's speed)."""
    out: dict[tuple[str, str, int], list[float]] = {}
    for (name, heap), refs in probes.items():
        zm = get_corpus_model(name)
        torch.manual_seed(0)
        try:
            times = latencies_at(framework, [at_current_speed(profile, r) for r in refs], heap,
                                 zm.build().eval(), batches, zm.make_inputs)
        except FtmodelError:
            continue
        for per_probe in times:
            for b, t in zip(batches, per_probe):
                out.setdefault((name, heap, b), []).append(t)
    return out


def toward(profile: Any, ref: Reference, exponent: float) -> Reference:
    """``ref`` moved part of the way from ``profile``'s nominal speed: each reference time
    ``nominal × (probed / nominal) ** exponent`` (1: the probe itself; 0: the profile's own
    speed). An experiment's knob: kernels that follow the references less than in proportion
    (``benchmarks/speed_kernels.py``) would be priced best below 1."""
    def part(probed: float | None, nominal: float | None) -> float | None:
        if probed is None or nominal is None:
            return probed
        return nominal * (probed / nominal) ** exponent
    prov = profile.provenance
    gemm = part(ref.gemm_s, nominal_reference_s(prov))
    return Reference(gemm if gemm is not None else ref.gemm_s,
                     part(ref.host_s, nominal_host_reference_s(prov)),
                     part(ref.memory_s, nominal_memory_reference_s(prov)))


def probe_columns(refs: Sequence[Reference]) -> dict[str, str]:
    """A row's probes as CSV cells (seconds, ``;``-separated, one per process), so that
    ``benchmarks/repredict.py`` can price the same points with another profile."""
    return {"now_reference_s": ";".join(f"{r.gemm_s:.6g}" for r in refs),
            "now_host_reference_s": ";".join(f"{r.host_s or 0.0:.6g}" for r in refs),
            "now_memory_reference_s": ";".join(f"{r.memory_s or 0.0:.6g}" for r in refs)}


def probes_of(row: Mapping[str, Any]) -> list[Reference]:
    """The probes :func:`probe_columns` wrote into ``row`` (none for a run without them)."""
    cells = [str(row.get(k) or "") for k in ("now_reference_s", "now_host_reference_s",
                                              "now_memory_reference_s")]
    if not cells[0]:
        return []
    cols = [[float(x) for x in c.split(";")] for c in cells]
    return [Reference(g, h or None, m or None) for g, h, m in zip(*cols)]


def now_rows(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows again, predicted at the speed probed before each measuring process (the median
    of those predictions against the median of the processes' times), as a heap setting of
    their own (``"<heap>, speed probed before measuring"``); none without probes."""
    out = []
    for r in rows:
        p = float(r.get("predicted_now_s", np.nan))
        if np.isfinite(p) and p > 0:
            out.append({**r, "heap": f"{r['heap']}, {NOW_LABEL}", "predicted_s": p,
                        "ratio": p / r["measured_s"],
                        "ape": abs(p - r["measured_s"]) / r["measured_s"]})
    return out
