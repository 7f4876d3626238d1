"""Does the NAS cost oracle rank candidates as this CPU does? Live measurements vs predictions.

    python benchmarks/oracle_rank.py                                # 60 candidates, ~15 min
    python benchmarks/oracle_rank.py --n 10 --frameworks eager --out /tmp/rank   # a quick look

``--n`` random candidates of the MobileNet-V2-style space (:mod:`ftmodel.oracle.search_space`) are
measured live on this CPU with each framework (eager: the module itself; onnxruntime: the ORT
session its lowering counted) at each batch, with :func:`ftmodel.tools.validation.compare_live_many`:
fixed threads, warm-up, every candidate × batch timed in the same interleaved rounds, the
fastest round's median kept; the noise of a point is its round spread (slowest round's median /
fastest's − 1). The oracle (:class:`ftmodel.oracle.CostOracle`, candidates built on the meta
device, as a search would) predicts the same candidates from the profile; its predictions are
checked against ``predict_latency``'s on the real modules (they must be identical).

Per framework and batch: Spearman ρ and Kendall τ between predicted and measured latency, and
the same for two baselines that need no profile — the candidate's MACs and its parameter count —
on the same points. Nothing is fitted to these measurements.

Writes benchmarks/results/local/oracle-rank.csv (``--out``; one row per candidate × framework ×
batch), oracle-rank-summary.md and oracle-rank.png (predicted vs measured per framework × batch).
"""

from __future__ import annotations

import argparse
import csv
import os
import random
import sys
import time
from pathlib import Path

import numpy as np
import torch
from scipy.stats import kendalltau, spearmanr

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ftmodel.api import Predictor  # noqa: E402
from ftmodel.measure import (DEFAULT_MALLOC_HELP, allocator_setting, cpu_name,  # noqa: E402
                             keep_heap, set_threads)
from ftmodel.oracle import CostOracle  # noqa: E402
from ftmodel.oracle.search_space import MobileNetV2Space  # noqa: E402
from ftmodel.tools.validation import LiveModel, LivePoint, compare_live_many  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from oracle_speed import default_profile  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"


def _rank(pred: np.ndarray, meas: np.ndarray) -> tuple[float, float]:
    return float(spearmanr(pred, meas).statistic), float(kendalltau(pred, meas).statistic)


def _plot(rows: list[dict[str, object]], keys: list[tuple[str, int]], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(keys), figsize=(4.2 * len(keys), 4.2), squeeze=False)
    for ax, (fw, b) in zip(axes[0], keys):
        sel = [r for r in rows if r["framework"] == fw and r["batch"] == b]
        meas = np.array([float(r["measured_ms"]) for r in sel])  # type: ignore[arg-type]
        pred = np.array([float(r["oracle_ms"]) for r in sel])  # type: ignore[arg-type]
        rho, tau = _rank(pred, meas)
        ax.scatter(meas, pred, s=14)
        lo, hi = min(meas.min(), pred.min()) * 0.9, max(meas.max(), pred.max()) * 1.1
        ax.plot([lo, hi], [lo, hi], "k-", lw=0.7)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_title(f"{fw}, batch {b}: ρ={rho:.3f} τ={tau:.3f}", fontsize=9)
        ax.set_xlabel("measured ms (this CPU)")
        ax.set_ylabel("oracle ms")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--profile", default=None,
                    help="calibrated CPU profile (default: this CPU's, see oracle_speed.default_profile)")
    ap.add_argument("--frameworks", default="eager,onnxruntime")
    ap.add_argument("--batches", default="1,16")
    ap.add_argument("--n", type=int, default=60)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--resolution", type=int, default=128)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--default-malloc", action="store_true", help=DEFAULT_MALLOC_HELP)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--round-s", type=float, default=0.1)
    ap.add_argument("--out", default=str(RESULTS / "local" / "oracle-rank"))
    args = ap.parse_args(argv)

    threads = set_threads(args.threads)
    if not args.default_malloc:
        keep_heap()
    fws = [f.strip() for f in args.frameworks.split(",") if f.strip()]
    batches = [int(b) for b in args.batches.split(",")]
    profile = args.profile or default_profile("onnxruntime")
    space = MobileNetV2Space(resolution=args.resolution)
    rng = random.Random(args.seed)
    cfgs = [space.sample(rng) for _ in range(args.n)]
    names = [f"c{i:02d}" for i in range(args.n)]
    torch.manual_seed(args.seed)
    real = {n: space.build(c).eval() for n, c in zip(names, cfgs)}
    t_start = time.time()

    rows: list[dict[str, object]] = []
    summary: list[dict[str, object]] = []
    max_diff = 0.0
    for fw in fws:
        heap = "plain" if args.default_malloc else "kept"  # the state this process measures in
        oracle = CostOracle(fw, profile, heap=heap)
        t0 = time.perf_counter()
        res = oracle.latencies({n: space.build(c, "meta") for n, c in zip(names, cfgs)},
                               batches, space.input_spec())
        oracle_s = time.perf_counter() - t0
        for f in res.failures:
            print(f"oracle skipped {f.candidate}: {f.error}", file=sys.stderr)
        skipped: dict[str, str] = {}
        print(f"[{time.time() - t_start:6.0f} s] {fw}: oracle done ({oracle_s:.1f} s); "
              f"measuring {len(names)} candidates × batches {batches} live ...", flush=True)
        points: list[LivePoint] = compare_live_many(
            [LiveModel(n, real[n], space.inputs) for n in names], batches,
            Predictor(fw, profile, heap=heap), rounds=args.rounds, round_s=args.round_s,
            on_skip=lambda name, err: skipped.__setitem__(name, str(err)))
        print(f"[{time.time() - t_start:6.0f} s] {fw}: measured", flush=True)
        for name, why in skipped.items():
            print(f"skipped {name} ({fw}): {why}", file=sys.stderr)
        by = {(p.model, p.batch): p for p in points}
        for b in batches:
            sel = [n for n in names if (n, b) in by and n in res.candidates]
            bi = batches.index(b)
            meas = np.array([by[(n, b)].measured_s for n in sel])
            orc = np.array([res[n][bi].latency_s for n in sel])
            ref = np.array([by[(n, b)].predicted_s for n in sel])
            max_diff = max(max_diff, float(np.max(np.abs(orc / ref - 1))))
            macs = np.array([by[(n, b)].macs for n in sel], dtype=float)
            params = np.array([by[(n, b)].params for n in sel], dtype=float)
            spread = np.array([by[(n, b)].spread for n in sel])
            ape = np.abs(orc - meas) / meas
            rho, tau = _rank(orc, meas)
            rho_m, tau_m = _rank(macs, meas)
            rho_p, tau_p = _rank(params, meas)
            summary.append({"framework": fw, "batch": b, "n": len(sel), "rho": rho, "tau": tau,
                            "rho_macs": rho_m, "tau_macs": tau_m, "rho_params": rho_p,
                            "tau_params": tau_p, "median_spread": float(np.median(spread)),
                            "p90_spread": float(np.percentile(spread, 90)),
                            "max_spread": float(spread.max()),
                            "median_ape": float(np.median(ape)),
                            "meas_range": float(meas.max() / meas.min())})
            for n in sel:
                p = by[(n, b)]
                rows.append({"candidate": n, "config": cfgs[names.index(n)].short(),
                             "framework": fw, "batch": b, "measured_ms": p.measured_s * 1e3,
                             "spread": p.spread, "oracle_ms": res[n][bi].latency_s * 1e3,
                             "predict_latency_ms": p.predicted_s * 1e3, "macs": p.macs,
                             "params": p.params, "n_launches": p.n_launches,
                             "regime": p.regime})
    elapsed = time.time() - t_start

    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out.with_suffix(".csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        for r in rows:
            w.writerow({k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in r.items()})
    _plot(rows, [(str(s["framework"]), int(s["batch"])) for s in summary],  # type: ignore[call-overload]
          out.with_suffix(".png"))
    ok = all(float(s["rho"]) >= 0.95 and float(s["rho"]) > max(float(s["rho_macs"]),  # type: ignore[arg-type]
                                                               float(s["rho_params"]))  # type: ignore[arg-type]
             for s in summary)
    # glibc allocator settings change what is measured: with its defaults, a candidate whose
    # large activations are handed back to the OS pays page faults on every forward
    malloc_env = " ".join(f"{k}={v}" for k, v in sorted(os.environ.items())
                          if k.startswith("MALLOC_"))
    cmd = " ".join(([malloc_env] if malloc_env else []) + ["python benchmarks/oracle_rank.py"]
                   + (sys.argv[1:] if argv is None else argv))
    lines = [
        "# NAS cost oracle: ranking live-measured candidates",
        "",
        f"`{cmd}`",
        "",
        f"{args.n} random candidates (seed {args.seed}) of the MobileNet-V2-style space "
        f"(`ftmodel.oracle.search_space`, resolution {args.resolution}), measured live on this CPU "
        f"({cpu_name()}, {threads} threads, allocator: {allocator_setting()}, torch "
        f"{torch.__version__}) with `ftmodel.tools.validation.compare_live_many` ({args.rounds} "
        f"interleaved rounds of ≥{args.round_s} s, warm-up, fastest round's median) and "
        f"predicted by `CostOracle` (candidates built on the meta device) with profile "
        f"`{profile}`. Baselines on the same points: MACs and parameter count (ranked as they "
        f"are; nothing fitted). Noise: round spread (slowest round's median / fastest − 1). "
        f"Run time {elapsed / 60:.1f} min.",
        "",
        "| framework | batch | n | oracle ρ | oracle τ | MACs ρ | MACs τ | params ρ | params τ "
        "| oracle median APE | measured max/min | noise median | noise P90 | noise max |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for s in summary:
        lines.append(
            f"| {s['framework']} | {s['batch']} | {s['n']} | **{s['rho']:.3f}** | "
            f"{s['tau']:.3f} | {s['rho_macs']:.3f} | {s['tau_macs']:.3f} | "
            f"{s['rho_params']:.3f} | {s['tau_params']:.3f} | {s['median_ape']:.1%} | "
            f"{s['meas_range']:.2f}× | {s['median_spread']:.1%} | {s['p90_spread']:.1%} | "
            f"{s['max_spread']:.1%} |")
    lines += [
        "",
        f"ρ ≥ 0.95 for every framework × batch, above both baselines: "
        f"**{'yes' if ok else 'no'}**. Oracle vs `predict_latency` on the real modules: "
        f"largest relative difference {max_diff:.2g} (identical predictions give 0).",
        "",
        f"![predicted vs measured]({out.with_suffix('.png').name})",
        "",
    ]
    out.with_name(out.name + "-summary.md").write_text("\n".join(lines))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
