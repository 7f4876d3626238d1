"""Which speed model makes a calibration's passes, and two calibrations, agree: re-scales the
unscaled pass records of profiles that keep them (``provenance.raw_op_times[cls][i]
["pass_timed"]`` and ``["pass_floor_timed"]``), without timing anything.

    python benchmarks/pass_speed_model.py FIT.json CHECK.json [--out speed-model.md]

Each pass of a sample holds its fastest round as timed and the fastest reference GEMM and
memory copy around its rounds (``calibration.sweep_stage.as_timed``). A speed model turns that
into a time at one common speed ``(G0, M0)`` (the first profile's nominal references):

    scaled = timed × (w × G0 / gemm + (1 − w) × M0 / memory) ** a

with ``w`` the class's GEMM share and ``a`` its exponent; the sample's device time is the
median over passes of the scaled sample minus the median of its scaled floor, as the
calibration computes it. Three models are compared per op class:

* ``unscaled`` (a = 0), ``current`` (the calibration's own: ``ftmodel.speed.gemm_share`` and
  ``DEVICE_SPEED_EXPONENT``), and ``fitted``: the (w, a) on a grid that makes FIT's passes
  agree best (smallest median over its samples of the standard deviation of the log scaled
  pass times). The fit reads FIT alone; CHECK is scored with FIT's choice.

Scores, per class: ``pass sd`` (that median standard deviation, in each profile) and
``B/A`` (median over common samples of log(device time CHECK / FIT) at the common speed:
the offset between the two calibrations; ``|B/A|`` its absolute value per sample, medianed).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ftmodel.speed import DEVICE_SPEED_EXPONENT, gemm_share  # noqa: E402

SHARES = (0.0, 0.25, 0.5, 0.75, 1.0)
EXPONENTS = (0.0, 0.25, 0.5, 0.75, 1.0, 1.25)
Model = tuple[float, float]  # (GEMM share w, exponent a)


def _load(path: Path) -> tuple[dict[str, list[dict[str, Any]]], tuple[float, float]]:
    doc = json.loads(path.read_text())
    prov = doc["provenance"]
    speed = prov.get("speed") or {}
    nominal = (speed.get("reference_s"), speed.get("memory_reference_s"))
    if not nominal[0] or not nominal[1]:
        raise SystemExit(f"{path}: no nominal GEMM and memory references in provenance.speed")
    raw = {cls: [s for s in samples if s.get("pass_timed") and s.get("pass_floor_timed")]
           for cls, samples in (prov.get("raw_op_times") or {}).items()}
    raw = {cls: s for cls, s in raw.items() if s}
    if not raw:
        raise SystemExit(f"{path}: no sample keeps its unscaled passes (pass_timed): "
                         "calibrations before 2026-11-29 do not record them")
    return raw, (float(nominal[0]), float(nominal[1]))


def _scaled(passes: Sequence[Sequence[float]], model: Model, g0: float, m0: float) -> np.ndarray:
    w, a = model
    t = np.array([p[0] for p in passes])
    g = np.array([p[1] for p in passes])
    m = np.array([p[2] if p[2] > 0 else p[1] for p in passes])  # no memory ref: GEMM's
    return np.asarray(t * (w * g0 / g + (1.0 - w) * m0 / m) ** a)


def _pass_sd(samples: list[dict[str, Any]], model: Model, g0: float, m0: float) -> float:
    sds = []
    for s in samples:
        if len(s["pass_timed"]) < 2:
            continue
        sds.append(float(np.std(np.log(_scaled(s["pass_timed"], model, g0, m0)))))
    return statistics.median(sds) if sds else math.nan


def _device(samples: list[dict[str, Any]], model: Model, g0: float, m0: float
            ) -> dict[str, float]:
    out = {}
    for s in samples:
        total = float(np.median(_scaled(s["pass_timed"], model, g0, m0)))
        floor = float(np.median(_scaled(s["pass_floor_timed"], model, g0, m0)))
        if total - floor > 0.02 * total:  # a sample lost in its floor's noise says nothing
            out[s["label"]] = total - floor
    return out


def _offset(a: dict[str, float], b: dict[str, float]) -> tuple[float, float, int]:
    common = [k for k in a if k in b]
    if not common:
        return math.nan, math.nan, 0
    logs = [math.log(b[k] / a[k]) for k in common]
    return statistics.median(logs), statistics.median(abs(x) for x in logs), len(common)


def _fit(samples: list[dict[str, Any]], g0: float, m0: float) -> Model:
    grid = [(w, a) for w in SHARES for a in EXPONENTS if a > 0] + [(0.0, 0.0)]
    return min(grid, key=lambda model: _pass_sd(samples, model, g0, m0))


def report(fit_path: Path, check_path: Path) -> str:
    fit_raw, (g0, m0) = _load(fit_path)
    check_raw, _ = _load(check_path)
    lines = [f"# Speed models on the unscaled passes: fitted on `{fit_path.name}`, checked on "
             f"`{check_path.name}`", "",
             f"Common speed: `{fit_path.name}`'s nominal references (GEMM {g0 * 1e3:.3f} ms, "
             f"memory {m0 * 1e3:.3f} ms). `pass sd`: median over samples of the standard "
             "deviation of a sample's log scaled pass times (fit / check). `B/A`: median log "
             "ratio of device times, check over fit, at the common speed (signed; |.|: "
             "median of the absolute values). `python benchmarks/pass_speed_model.py "
             f"{fit_path.name} {check_path.name}`.", "",
             "| class | samples | model (w, a) | pass sd fit | pass sd check | B/A | abs B/A |",
             "|---|---|---|---|---|---|---|"]
    summary: dict[str, list[float]] = {"unscaled": [], "current": [], "fitted": []}
    for cls, fit_samples in fit_raw.items():
        check_samples = check_raw.get(cls)
        if not check_samples:
            continue
        models = {"unscaled": (0.0, 0.0), "current": (gemm_share(cls), DEVICE_SPEED_EXPONENT),
                  "fitted": _fit(fit_samples, g0, m0)}
        for name, model in models.items():
            sd_fit = _pass_sd(fit_samples, model, g0, m0)
            sd_check = _pass_sd(check_samples, model, g0, m0)
            signed, absolute, n = _offset(_device(fit_samples, model, g0, m0),
                                          _device(check_samples, model, g0, m0))
            summary[name].append(absolute)
            lines.append(f"| {cls} | {n} | {name} ({model[0]:.2f}, {model[1]:.2f}) | "
                         f"{sd_fit:.3f} | {sd_check:.3f} | {signed:+.3f} | {absolute:.3f} |")
    lines += ["", "Median over classes of abs B/A: " + ", ".join(
        f"{k} {statistics.median(v):.3f}" for k, v in summary.items() if v) + "."]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("fit", type=Path)
    ap.add_argument("check", type=Path)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    text = report(args.fit, args.check)
    if args.out:
        args.out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
