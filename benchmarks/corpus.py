"""Accuracy on models ftmodel was not developed against, measured as a user measures them.

    python benchmarks/corpus.py --profile benchmarks/results/cpu-epyc/cpu-profile.json \\
        --frameworks eager,torchscript,onnxruntime,inductor --out-dir benchmarks/results/cpu-epyc

For each framework, every model of :mod:`ftmodel.tools.corpus` is first predicted at each batch (in
this process), then measured by ``benchmarks/plain_measure.py`` in a fresh Python process of its
own (one per model, framework and heap setting; nothing else runs meanwhile; with
``--processes N``, N such processes in N passes over the corpus, and a point's time is their
median: a fresh process lands in its own memory layout, heap and thread placement, which moves a
point by a median 7-10% between runs on a 2-vCPU EPYC, more than its rounds spread): with glibc's
default malloc (``plain``, what a user's process does) and, with ``--heap plain,kept``, also
with the heap kept mapped (``kept``, the steady state of jemalloc/tcmalloc or PyTorch's CUDA
caching allocator). Predictions are the same for both; each is compared with both. Before each
measuring process, the speed probe of ``speed="now"`` (``ftmodel.current_speed``, about one
second) is taken, and every point is also predicted at its processes' probes
(``corpus_speed.py``; ``--no-speed-now`` skips it).

Results, per framework F: ``corpus-F.csv`` (one row per model × batch × heap setting) and
``corpus-F-summary.md``: median / P90 APE, share within ±20%, Spearman ρ and the MACs proxy
(``a + b·MACs`` fitted on the same points) for the held-out half and the tuning half
separately, per family, per batch, and the models the framework could not predict or run.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import json
import os
import subprocess
import sys
import time
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from scipy.stats import spearmanr

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ftmodel.api import Predictor  # noqa: E402
from ftmodel.tools.corpus import CORPUS, FAMILIES, get_corpus_model, is_held_out  # noqa: E402
from ftmodel.errors import FtmodelError  # noqa: E402
from ftmodel.frameworks.base import artifact_room, canonical_framework  # noqa: E402
from ftmodel.hardware.registry import load_profile  # noqa: E402
from ftmodel.calibration.speed_probe import reference_probe_s  # noqa: E402
from ftmodel.measure import cpu_name  # noqa: E402
from ftmodel.current_speed import probe_speed  # noqa: E402
from ftmodel.speed import (Reference, device_speed_exponent,  # noqa: E402
                           nominal_host_reference_s, nominal_memory_reference_s,
                           nominal_reference_s)

sys.path.insert(0, str(ROOT / "benchmarks"))
from corpus_speed import (NOW_LABEL, at_calibration_speed, at_speed_rows,  # noqa: E402
                          memory_line, now_rows, predict_at_probes, probe_columns, speed_line)

MEASURE = ROOT / "benchmarks" / "plain_measure.py"


def _predict(predictor: Predictor, names: Sequence[str], batches: Sequence[int]
             ) -> tuple[dict[tuple[str, int], Any], dict[str, str]]:
    """Predictions per (model, batch), and per model that has none, why (``crash: ...`` for an
    exception that is not ftmodel's own named error)."""
    preds: dict[tuple[str, int], Any] = {}
    failed: dict[str, str] = {}
    for name in names:
        zm = get_corpus_model(name)
        torch.manual_seed(0)
        started = time.perf_counter()
        try:
            model = zm.build()
            for b, p in zip(batches, predictor.predict(model, list(batches), zm.make_inputs)):
                preds[(name, b)] = p
        except FtmodelError as err:
            failed[name] = f"{type(err).__name__}: {_first_line(err)}"
        except Exception as err:  # noqa: BLE001 - a crash is a finding, reported as such
            tb = traceback.extract_tb(err.__traceback__)[-1]
            failed[name] = (f"crash: {type(err).__name__}: {_first_line(err)} "
                            f"({Path(tb.filename).name}:{tb.lineno})")
        print(f"  predicted {name:<28} {time.perf_counter() - started:6.1f} s"
              + (f"  {failed[name]}" if name in failed else ""), flush=True)
    return preds, failed


def _first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return text[0][:300] if text else ""


def _measure(name: str, framework: str, batches: Sequence[int], keep_heap: bool,
             args: argparse.Namespace) -> dict[str, Any]:
    cmd = [sys.executable, str(MEASURE), "--model", name, "--framework", framework,
           "--batches", ",".join(map(str, batches)), "--threads", str(args.threads),
           "--rounds", str(args.rounds), "--round-s", str(args.round_s)]
    if keep_heap:
        cmd.append("--keep-heap")
    env = {k: v for k, v in os.environ.items() if not k.startswith("FTMODEL_")}
    env["OMP_NUM_THREADS"] = str(args.threads)
    try:
        proc = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=args.timeout_s,
                              env=env)
    except subprocess.TimeoutExpired:
        return {"error": f"measurement timed out after {args.timeout_s} s"}
    if proc.returncode != 0:
        lines = [ln for ln in proc.stderr.strip().splitlines() if ln.strip()]
        return {"error": lines[-1][:300] if lines else f"exit {proc.returncode}"}
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


def _stats(pred: np.ndarray, meas: np.ndarray) -> dict[str, float]:
    ape = np.abs(pred - meas) / meas
    rho = float(spearmanr(pred, meas).statistic) if len(meas) > 2 else float("nan")
    return {"n": float(len(meas)), "median_ape": float(np.median(ape)),
            "p90_ape": float(np.percentile(ape, 90)), "within_20pct": float(np.mean(ape <= 0.2)),
            "spearman": rho, "median_ratio": float(np.median(pred / meas))}


def _proxy(rows: Sequence[dict[str, Any]]) -> np.ndarray:
    """``a + b·MACs`` fitted by least squares on these rows' measured times: its predictions."""
    macs = np.array([r["macs"] for r in rows], dtype=float)
    y = np.array([r["measured_s"] for r in rows])
    a = np.stack([np.ones_like(macs), macs], axis=1)
    coef, *_ = np.linalg.lstsq(a, y, rcond=None)
    return np.maximum(a @ coef, 1e-9)


def _table_row(label: str, rows: Sequence[dict[str, Any]], proxy: bool = True) -> str:
    if not rows:
        return f"| {label} | 0 | – | – | – | – | – |" + (" – |" if proxy else "")
    meas = np.array([r["measured_s"] for r in rows])
    s = _stats(np.array([r["predicted_s"] for r in rows]), meas)
    cells = (f"| {label} | {int(s['n'])} | {s['median_ape']:.1%} | {s['p90_ape']:.1%} | "
             f"{s['within_20pct']:.0%} | {s['spearman']:.3f} | {s['median_ratio']:.2f} |")
    if proxy:
        p = _stats(_proxy(rows), meas)
        cells += f" {p['median_ape']:.1%} ({p['spearman']:.3f}) |"
    return cells


def _cells(rows: Sequence[dict[str, Any]], heaps: Sequence[str]) -> str:
    """Median APE (and median ratio) of ``rows`` for each heap setting, as table cells."""
    cells = []
    for heap in heaps:
        hr = [r for r in rows if r["heap"] == heap]
        if not hr:
            cells.append("–")
            continue
        s = _stats(np.array([r["predicted_s"] for r in hr]),
                   np.array([r["measured_s"] for r in hr]))
        cells.append(f"{s['median_ape']:.1%} ({s['median_ratio']:.2f})")
    return " | ".join(cells)


def _summary(rows: list[dict[str, Any]], framework: str, failed: dict[str, str],
             run_failed: dict[str, str], args: argparse.Namespace, elapsed_s: float,
             profile_desc: str, probes: Sequence[float] = (), profile: Any = None) -> str:
    spreads = [r["spread"] for r in rows]
    proc = [r["process_spread"] for r in rows]
    proc_at_speed = [float(r["process_spread_at_speed"]) for r in rows
                     if np.isfinite(r.get("process_spread_at_speed", np.nan))]
    measured_heaps = list(dict.fromkeys(r["heap"] for r in rows))
    memory = [memory_line(rows, profile)] if rows else []  # the measured points only
    speed_rows = at_speed_rows(rows)
    probed_rows = now_rows(rows)
    rows = [*rows, *speed_rows, *probed_rows]
    heaps = list(dict.fromkeys(r["heap"] for r in rows))  # table columns
    lines = [
        f"# Corpus validation: {framework} on {cpu_name()}",
        "",
        f"- date: {datetime.date.today().isoformat()}; torch {torch.__version__}, "
        f"{args.threads} threads; run took {elapsed_s:.0f} s",
        f"- profile: {profile_desc}",
        f"- command: `python benchmarks/corpus.py {' '.join(sys.argv[1:])}`",
        "- measured by `benchmarks/plain_measure.py`, "
        + ("one fresh process per model" if args.processes == 1 else
           f"{args.processes} fresh processes per model (one per pass over the corpus; a "
           "point's time is the median of its processes')")
        + f" (torch.utils.benchmark.Timer, {args.rounds} rounds of "
        f"{args.round_s} s, fastest round's median); heap settings: {', '.join(measured_heaps)} "
        "(plain = glibc's defaults, kept = heap kept mapped)",
        f"- noise: median round spread {np.median(spreads):.1%}, P90 "
        f"{np.percentile(spreads, 90):.1%} (slowest round / fastest round − 1)"
        + (f"; between processes median {np.median(proc):.1%}, P90 "
           f"{np.percentile(proc, 90):.1%} (slowest process / fastest − 1)"
           if args.processes > 1 else "")
        + (f"; at the calibration's speed, between processes median "
           f"{np.median(proc_at_speed):.1%}, P90 {np.percentile(proc_at_speed, 90):.1%}"
           if args.processes > 1 and proc_at_speed else "") if rows else "- no points",
        *([speed_line(probes, profile)] if probes else []),
        *memory,
        *(["- *at calibration speed*: each round's time scaled by the calibration's nominal "
           "reference GEMM time over the reference timed around that round in the same process, "
           f"to the power {device_speed_exponent(profile.provenance):g} (the profile's "
           "`provenance.speed.device_exponent`; `ftmodel.speed`; the part the prediction puts "
           "on the host by the host "
           "reference's, where the calibration timed one), the same scaling the calibration "
           "applied to its own measurements: the machine's changes of speed between "
           "calibration and measurement, and between processes, taken out; the plain rows are "
           "the times as measured"]
          if speed_rows else []),
        *([f"- *{NOW_LABEL}*: predicted with `speed=\"now\"`'s probe "
           "(`ftmodel.current_speed.probe_speed`, about one second) taken right before each "
           "measuring process, the profile re-expressed at it; the median of those predictions "
           "against the median of the processes' times: what a user who predicts with "
           "`speed=\"now\"` and then measures gets (a prediction: nothing timed during the "
           "measurement enters it)"] if probed_rows else []),
        "",
        "APE = |predicted − measured| / measured; ratio = median predicted / measured; the MACs "
        "proxy is `a + b·MACs` fitted by least squares on the same points (its fit sees the "
        "measurements; ftmodel's prediction does not).",
        "",
        "| half, heap | points | median APE | P90 APE | within ±20% | Spearman ρ | ratio | "
        "MACs proxy median APE (ρ) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for half in ("held-out", "tuning"):
        for heap in heaps:
            lines.append(_table_row(f"**{half}**, {heap}" if half == "held-out" else
                                    f"{half}, {heap}",
                                    [r for r in rows if r["half"] == half and r["heap"] == heap]))
    lines += ["", "## Per family (median APE; ratio in brackets)", "",
              "| family | half | models | " + " | ".join(heaps) + " |",
              "|---|---|---|" + "---|" * len(heaps)]
    for fam in FAMILIES:
        for half in ("held-out", "tuning"):
            fr = [r for r in rows if r["family"] == fam and r["half"] == half]
            if fr:
                lines.append(f"| {fam} | {half} | {len({r['model'] for r in fr})} | "
                             + _cells(fr, heaps) + " |")
    lines += ["", "## Per batch (median APE; ratio in brackets)", "",
              "| batch | half | " + " | ".join(heaps) + " |", "|---|---|" + "---|" * len(heaps)]
    for b in sorted({r["batch"] for r in rows}):
        for half in ("held-out", "tuning"):
            br = [r for r in rows if r["batch"] == b and r["half"] == half]
            lines.append(f"| {b} | {half} | " + _cells(br, heaps) + " |")
    lines += ["", "## Per model (predicted / measured ms per batch)", "",
              "| model | family | half | heap | " + " | ".join(
                  f"b{b}" for b in sorted({r["batch"] for r in rows}))
              + " | page faults per call, measured (predicted) |",
              "|---|---|---|---|" + "---|" * (len({r["batch"] for r in rows}) + 1)]
    for name in CORPUS:
        for heap in heaps:
            mr = sorted((r for r in rows if r["model"] == name and r["heap"] == heap),
                        key=lambda r: r["batch"])
            if mr:
                lines.append(
                    f"| {name} | {mr[0]['family']} | {mr[0]['half']} | {heap} | " + " | ".join(
                        f"{r['predicted_s'] * 1e3:.2f} / {r['measured_s'] * 1e3:.2f}"
                        for r in mr) + " | " + ", ".join(
                        f"{r['faults_per_call']:.0f} ({r['predicted_faults']:.0f})"
                        for r in mr) + " |")
    crashes = {m: why for m, why in failed.items() if why.startswith("crash")}
    lines += ["", "## Models without a prediction", ""]
    if not failed:
        lines.append("None: every corpus model got a prediction.")
    for m, why in failed.items():
        runs = "its runner also fails" if m in run_failed else "**its runner runs it**"
        lines.append(f"- {m} ({'held-out' if is_held_out(m) else 'tuning'}): {why}; {runs}")
    lines += ["", f"Crashes (an exception other than a named ftmodel error): {len(crashes)}."]
    other = {m: e for m, e in run_failed.items() if m not in failed}
    if other:
        lines += ["", "## Predicted but not measured (the runner failed)", ""]
        lines += [f"- {m}: {e}" for m, e in other.items()]
    return "\n".join(lines) + "\n"


def run_framework(framework: str, profile: Any, profile_desc: str, args: argparse.Namespace,
                  names: Sequence[str], batches: Sequence[int], heaps: Sequence[str],
                  out: Path) -> None:
    # inductor's lowering-only artifacts hold its code, not a compiled module: keep them all,
    # so that the predictions at each process's probe reuse them
    room = len(names) * len(batches) if framework == "inductor" else 0
    with artifact_room(framework, room):
        _run_framework(framework, profile, profile_desc, args, names, batches, heaps, out)


def _run_framework(framework: str, profile: Any, profile_desc: str, args: argparse.Namespace,
                   names: Sequence[str], batches: Sequence[int], heaps: Sequence[str],
                   out: Path) -> None:
    started = time.time()
    preds_by_heap: dict[str, dict[tuple[str, int], Any]] = {}
    failed: dict[str, str] = {}
    for heap in sorted(heaps):  # "kept" first: "plain" reuses it where the heap is moot
        predictor = Predictor(framework, profile, heap=heap)
        if predictor.heap in preds_by_heap:
            preds_by_heap[heap] = preds_by_heap[predictor.heap]
            continue
        print(f"{framework}: predicting {len(names)} models x batches {list(batches)} "
              f"(heap {predictor.heap})", flush=True)
        preds_by_heap[heap], failed = _predict(predictor, names, batches)
        preds_by_heap[predictor.heap] = preds_by_heap[heap]
    run_failed: dict[str, str] = {}
    # (model, heap, batch) -> one measurement per process; each pass measures every model once,
    # so a model's processes lie minutes apart rather than back to back
    points: dict[tuple[str, str, int], list[dict[str, Any]]] = {}
    probes: list[float] = []  # the machine's speed: calibration's reference GEMM, per pass
    # (model, heap) -> speed="now"'s probe taken right before each of its measuring processes
    now_probes: dict[tuple[str, str], list[Reference]] = {}
    for n_pass in range(args.processes):
        probes.append(reference_probe_s("cpu", 5))
        print(f"{framework}: measuring, one process per model and heap setting"
              + (f" (pass {n_pass + 1} of {args.processes})" if args.processes > 1 else ""),
              flush=True)
        for name in names:
            if name in run_failed:
                continue
            for heap in heaps:
                probe = probe_speed() if args.speed_now else None
                t0 = time.perf_counter()
                res = _measure(name, framework, batches, heap == "kept", args)
                if "error" in res:
                    run_failed[name] = res["error"]
                    print(f"  {name:<28} {heap:<5} runner failed: {res['error']}", flush=True)
                    break
                if probe is not None:
                    now_probes.setdefault((name, heap), []).append(probe)
                shown = []
                for b in batches:
                    m = res["points"][str(b)]
                    points.setdefault((name, heap, b), []).append(m)
                    p = preds_by_heap[heap].get((name, b))
                    shown.append(f"b{b} {m['time_s'] * 1e3:.2f}"
                                 + (f"/{p.latency_s * 1e3:.2f}" if p is not None else ""))
                print(f"  {name:<28} {heap:<5} {'  '.join(shown)}  "
                      f"({time.perf_counter() - t0:.0f} s)", flush=True)
    probes.append(reference_probe_s("cpu", 5))
    if now_probes:
        print(f"{framework}: predicting at the speed probed before each measurement", flush=True)
    now_preds = predict_at_probes(framework, profile, batches, now_probes)
    nominal_s = nominal_reference_s(profile.provenance)
    nominal_host_s = nominal_host_reference_s(profile.provenance)
    nominal_memory_s = nominal_memory_reference_s(profile.provenance)
    exponent = device_speed_exponent(profile.provenance)
    rows: list[dict[str, Any]] = []
    for name in names:
        if name in run_failed:
            continue
        zm = get_corpus_model(name)
        for heap in heaps:
            for b in batches:
                p = preds_by_heap[heap].get((name, b))
                ms = points.get((name, heap, b), [])
                if p is None or not ms:
                    continue
                times = [m["time_s"] for m in ms]
                measured = float(np.median(times))
                share = p.overhead_s / (p.overhead_s + p.compute_s) \
                    if p.overhead_s + p.compute_s > 0 else 0.0
                now = now_preds.get((name, heap, b), [])
                at_speed = [at_calibration_speed(m, nominal_s, nominal_host_s, share, exponent)
                            for m in ms]
                rows.append({
                    "model": name, "family": zm.family,
                    "half": "held-out" if is_held_out(name) else "tuning",
                    "framework": framework, "heap": heap, "batch": b,
                    "measured_s": measured,
                    "spread": float(np.median([max(m["round_medians_s"])
                                               / min(m["round_medians_s"]) - 1 for m in ms])),
                    "process_spread": max(times) / min(times) - 1,
                    "processes": len(ms),
                    "faults_per_call": float(np.median([m["faults_per_call"] for m in ms])),
                    "predicted_faults": getattr(p, "page_faults", 0.0),
                    "predicted_heap": getattr(p, "heap", "kept"), "predicted_s": p.latency_s,
                    "ratio": p.latency_s / measured,
                    "ape": abs(p.latency_s - measured) / measured,
                    "overhead_s": p.overhead_s, "compute_s": p.compute_s, "macs": p.macs,
                    "n_launches": p.n_launches,
                    "reference_s": float(np.median([t for m in ms
                                                    for t in m.get("round_references_s", [])]
                                                   or [np.nan])),
                    "nominal_reference_s": nominal_s if nominal_s is not None else np.nan,
                    "nominal_host_reference_s": (nominal_host_s if nominal_host_s is not None
                                                 else np.nan),
                    "memory_reference_s": float(np.median(
                        [t for m in ms for t in m.get("round_memory_references_s", []) if t > 0]
                        or [np.nan])),
                    "nominal_memory_reference_s": (nominal_memory_s
                                                   if nominal_memory_s is not None else np.nan),
                    "measured_at_speed_s": (float(np.median(at_speed))
                                            if None not in at_speed else np.nan),
                    "process_spread_at_speed": (max(at_speed) / min(at_speed) - 1
                                                if None not in at_speed else np.nan),
                    "predicted_now_s": float(np.median(now)) if now else np.nan,
                    **probe_columns(now_probes.get((name, heap), []))})
    stem = out / f"corpus-{framework}"
    if rows:
        with open(stem.with_suffix(".csv"), "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
    text = _summary(rows, framework, failed, run_failed, args, time.time() - started,
                    profile_desc, probes, profile)
    stem.with_name(stem.name + "-summary.md").write_text(text)
    print(text, flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--profile", required=True, help="a calibrated profile (path or name)")
    ap.add_argument("--frameworks", default="eager")
    ap.add_argument("--models", default="", help="comma-separated corpus names (default: all)")
    ap.add_argument("--half", choices=("all", "held-out", "tuning"), default="all")
    ap.add_argument("--batches", default="1,4,16")
    ap.add_argument("--heap", default="plain,kept", help="plain, kept or plain,kept")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--round-s", type=float, default=0.2)
    ap.add_argument("--processes", type=int, default=1,
                    help="fresh processes per model and heap setting, one per pass over the "
                         "corpus; a point's time is their median (default 1)")
    ap.add_argument("--timeout-s", type=float, default=900)
    ap.add_argument("--no-speed-now", dest="speed_now", action="store_false",
                    help="skip the speed probe before each measuring process (and the rows "
                         "predicted at it)")
    ap.add_argument("--out-dir", required=True)
    args = ap.parse_args(argv)

    torch.set_num_threads(args.threads)
    profile = load_profile(args.profile)
    shown = Path(args.profile)
    profile_desc = (f"`{shown.resolve().relative_to(ROOT)}`" if shown.exists()
                    and shown.resolve().is_relative_to(ROOT) else f"`{args.profile}`")
    profile_desc += (f" ({profile.kind}, calibrated {profile.provenance.get('date', '?')[:10]}, "
                     f"allocator: {profile.provenance.get('allocator', 'default')})")
    names = [get_corpus_model(n).name for n in args.models.split(",") if n.strip()] or list(CORPUS)
    if args.half != "all":
        names = [n for n in names if is_held_out(n) == (args.half == "held-out")]
    batches = sorted(int(b) for b in args.batches.split(","))
    if args.processes < 1:
        ap.error(f"--processes takes a count of at least 1, got {args.processes}")
    heaps = [h.strip() for h in args.heap.split(",") if h.strip()]
    if not set(heaps) <= {"plain", "kept"}:
        ap.error(f"--heap takes plain, kept or plain,kept, got {args.heap!r}")
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for fw in dict.fromkeys(canonical_framework(f) for f in args.frameworks.split(",")):
        run_framework(fw, profile, profile_desc, args, names, batches, heaps, out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
