"""How fast is the NAS cost oracle? Candidates per second, cold and warm, vs one live measurement.

    python benchmarks/oracle_speed.py                         # eager, batch 1, this CPU's profile
    python benchmarks/oracle_speed.py --framework eager --device a100 --batch 8
    python benchmarks/oracle_speed.py --cprofile /tmp/oracle.prof   # profile the warm phase

Candidates are sampled at random from the MobileNet-V2-style space of
:mod:`ftmodel.oracle.search_space` (per stage: depth and width; per block: expansion ratio and kernel
size) and built on the meta device (no weight memory). What is timed:

* **cold**: ``CostOracle.latency`` on the first ``--cold`` (200) candidates, from an empty cache:
  every new block is traced on fake tensors, every kernel priced;
* **warm**: the same on the next ``--warm`` (1000) candidates, new random configurations whose
  blocks the cold phase has (mostly) seen already.

Building each candidate (``space.build(cfg, "meta")``) is timed separately and excluded from the
rates: a search builds its candidates whatever predicts their latency. The progress bar is
redrawn between candidates only (no refresh thread competing with the timed calls). The per-candidate
prediction time is set against one live measurement of the same candidate on this CPU (eager,
the same batch, 2 threads) made the way ftmodel measures (``ftmodel.measure``, as
``ftmodel.tools.validation`` uses it: weights built, warm-up, 5 rounds of at least 0.1 s, the fastest
round's median), and against a single forward pass.

Writes benchmarks/results/local/oracle-speed.csv (``--out``; one row per phase) and
oracle-speed-summary.md.
"""

from __future__ import annotations

import argparse
import cProfile
import csv
import platform
import pstats
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ftmodel.hardware.registry import default_profile_path, load_profile  # noqa: E402
from ftmodel.measure import (DEFAULT_MALLOC_HELP, allocator_setting, cpu_name,  # noqa: E402
                             keep_heap,
                             measure_interleaved, set_threads)
from ftmodel.oracle import CostOracle  # noqa: E402
from ftmodel.oracle.search_space import CandidateConfig, MobileNetV2Space  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"


def default_profile(framework: str) -> str:
    """A calibrated profile of this CPU model with ``framework`` in its host half: the one
    ``ftmodel calibrate`` keeps in the user cache, else one committed under
    benchmarks/results (``cpu-profile.json`` in it or a subfolder, one per machine)."""
    here = cpu_name()
    for path in (default_profile_path("local-cpu"), *sorted(RESULTS.glob("**/cpu-profile.json"))):
        try:
            prof = load_profile(str(path))
        except Exception:  # noqa: BLE001 - not a usable profile: try the next
            continue
        if (prof.host is not None and framework in prof.host.frameworks
                and prof.provenance.get("device") == here):
            return str(path)
    raise SystemExit(f"no calibrated profile of this CPU ({here}) with {framework!r}: run "
                     f"`ftmodel calibrate --device cpu --frameworks eager,{framework}` or pass "
                     "the profile's path")


def _phase(oracle: CostOracle, space: MobileNetV2Space, cfgs: list[CandidateConfig],
           batch: int, label: str) -> tuple[float, float, list[float]]:
    """Predict each candidate; returns (prediction seconds, build seconds, latencies)."""
    from rich.progress import Progress
    x = space.input_spec()
    pred_s = build_s = 0.0
    lat: list[float] = []
    # no auto-refresh: its thread would take the GIL from the timed calls (measured: 13-20%
    # of the oracle's time); the bar is redrawn between candidates, outside the timed region
    with Progress(transient=True, auto_refresh=False) as bar:
        task = bar.add_task(label, total=len(cfgs))
        for i, cfg in enumerate(cfgs):
            t0 = time.perf_counter()
            model = space.build(cfg, device="meta")
            t1 = time.perf_counter()
            lat.append(oracle.latency(model, batch, x).latency_s)
            t2 = time.perf_counter()
            build_s += t1 - t0
            pred_s += t2 - t1
            bar.update(task, advance=1, refresh=i % 25 == 0)
    return pred_s, build_s, lat


def write_rows(out: Path, rows: list[dict[str, Any]]) -> Path:
    """``rows`` as ``out`` with a .csv suffix (folders made); returns ``out``."""
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out.with_suffix(".csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    return out


def live_cost(space: MobileNetV2Space, cfg: CandidateConfig, batch: int, rounds: int,
               round_s: float) -> tuple[float, float]:
    """(seconds of one forward pass, seconds of one live measurement) of ``cfg`` on this CPU
    with eager PyTorch. The measurement is ftmodel's own protocol
    (:func:`ftmodel.measure.measure_interleaved`, as :mod:`ftmodel.tools.validation` runs it: 2
    warm-up calls, ``rounds`` rounds of at least ``round_s`` seconds, the fastest round's
    median), and its cost includes building the candidate with real weights."""
    t0 = time.perf_counter()
    model = space.build(cfg).eval()
    x = space.inputs(batch)

    def run() -> object:
        with torch.no_grad():
            return model(x)

    m = measure_interleaved({"c": run}, rounds=rounds, round_s=round_s, warmup=2,
                            max_reps=50)["c"]
    return m.time_s, time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--framework", default="eager")
    ap.add_argument("--device", "--gpu", dest="gpu", default=None,
                    help="profile (default: this CPU's calibrated one)")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--resolution", type=int, default=128)
    ap.add_argument("--cold", type=int, default=200)
    ap.add_argument("--warm", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--default-malloc", action="store_true", help=DEFAULT_MALLOC_HELP)
    ap.add_argument("--rounds", type=int, default=5, help="rounds of a live measurement")
    ap.add_argument("--round-s", type=float, default=0.1, help="seconds per round")
    ap.add_argument("--live", type=int, default=5, help="candidates measured live")
    ap.add_argument("--cprofile", default=None, help="write a cProfile of the warm phase here")
    ap.add_argument("--out", default=str(RESULTS / "local" / "oracle-speed"))
    args = ap.parse_args(argv)

    threads = set_threads(args.threads)
    if not args.default_malloc:
        keep_heap()
    gpu = args.gpu or default_profile(args.framework)
    space = MobileNetV2Space(resolution=args.resolution)
    rng = random.Random(args.seed)
    cfgs = [space.sample(rng) for _ in range(args.cold + args.warm)]
    oracle = CostOracle(args.framework, gpu)
    # not timed: imports and the profile's curves, paid once per process
    oracle.latency(torch.nn.Sequential(torch.nn.Identity()), 1, torch.empty(1, 1))
    oracle.clear()

    cold_s, cold_build, _ = _phase(oracle, space, cfgs[:args.cold], args.batch, "cold")
    info_cold = oracle.cache_info()
    prof = cProfile.Profile() if args.cprofile else None
    if prof is not None:
        prof.enable()
    warm_s, warm_build, _ = _phase(oracle, space, cfgs[args.cold:], args.batch, "warm")
    if prof is not None:
        prof.disable()
        prof.dump_stats(args.cprofile)
        pstats.Stats(prof).sort_stats("cumulative").print_stats(25)
    info = oracle.cache_info()

    live = []
    for i in range(args.live):  # measured on candidates of the warm phase
        cfg = cfgs[args.cold + i * max(1, args.warm // max(1, args.live))]
        med, total = live_cost(space, cfg, args.batch, args.rounds, args.round_s)
        live.append((med, total))
    live_med = statistics.median(m for m, _ in live)
    live_total = statistics.median(t for _, t in live)
    per_pred_warm = warm_s / max(1, args.warm)
    per_pred_cold = cold_s / max(1, args.cold)

    rows = [
        {"phase": "cold", "candidates": args.cold, "predict_s": cold_s,
         "candidates_per_s": args.cold / cold_s, "ms_per_candidate": 1e3 * per_pred_cold,
         "build_s": cold_build, "block_traces": info_cold.block_traces,
         "block_hits": info_cold.block_hits, "block_misses": info_cold.block_misses,
         "kernels_priced": info_cold.kernels},
        {"phase": "warm", "candidates": args.warm, "predict_s": warm_s,
         "candidates_per_s": args.warm / warm_s, "ms_per_candidate": 1e3 * per_pred_warm,
         "build_s": warm_build, "block_traces": info.block_traces,
         "block_hits": info.block_hits - info_cold.block_hits,
         "block_misses": info.block_misses - info_cold.block_misses,
         "kernels_priced": info.kernels},
    ]
    out = write_rows(Path(args.out), rows)
    ratio_one = live_med / per_pred_warm
    ratio_full = live_total / per_pred_warm
    prof_name = getattr(oracle.predictor.profile, "name", str(gpu))
    lines = [
        "# NAS cost oracle: speed",
        "",
        "`" + " ".join(["python benchmarks/oracle_speed.py"]
                       + (sys.argv[1:] if argv is None else argv)) + "`",
        "",
        f"MobileNet-V2-style space (`ftmodel.oracle.search_space`, resolution {args.resolution}), "
        f"{args.cold} + {args.warm} random candidates (seed {args.seed}) built on the meta "
        f"device; framework `{args.framework}`, profile `{prof_name}` ({gpu}), batch "
        f"{args.batch}, dtype fp32. Host: {cpu_name()}, "
        f"{threads} torch threads, torch {torch.__version__}, Python "
        f"{platform.python_version()}. Building candidates is excluded from the rates.",
        "",
        "| phase | candidates | candidates/s | ms / candidate | build s (excluded) | "
        "block traces (hits / misses) |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(f"| {r['phase']} | {r['candidates']} | {r['candidates_per_s']:.0f} | "
                     f"{r['ms_per_candidate']:.2f} | {r['build_s']:.2f} | "
                     f"{r['block_hits']} / {r['block_misses']} |")
    lines += [
        "",
        f"Distinct block traces cached: {info.block_traces}; kernels with memoised device "
        f"times: {info.kernels}; programs cached: {info.programs} "
        f"(LRU of {oracle.max_programs}).",
        "",
        f"**One live measurement of the same candidates** (eager, batch {args.batch}, "
        f"{threads} threads, allocator: {allocator_setting()}, median over {args.live} "
        f"warm-phase candidates): one forward pass "
        f"{1e3 * live_med:.1f} ms; one measurement as ftmodel.tools.validation makes it (build with "
        f"weights, 2 warm-up calls, {args.rounds} rounds of ≥{args.round_s} s, fastest round's "
        f"median) {1e3 * live_total:.0f} ms. One warm prediction costs "
        f"{1e3 * per_pred_warm:.2f} ms: "
        f"**{ratio_one:.0f}× cheaper than a single forward pass, {ratio_full:.0f}× cheaper "
        f"than one measurement** ({live_total / per_pred_cold:.0f}× for a cold prediction).",
        "",
    ]
    out.with_name(out.name + "-summary.md").write_text("\n".join(lines))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
