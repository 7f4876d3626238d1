"""Hardware-aware NAS with Optuna and ftmodel's cost oracle: the Pareto front depends on the
framework you deploy with.

    pip install 'ftmodel[examples]'        # optuna (and matplotlib for the figure)
    python examples/nas_optuna.py                           # eager vs onnxruntime, this CPU
    python examples/nas_optuna.py --gpu a100 --frameworks eager,cudagraphs --trials 300

For each framework, a multi-objective Optuna study (TPE sampler, seeded) searches the
MobileNet-V2-style space of :mod:`ftmodel.oracle.search_space` for candidates that maximise an accuracy
proxy and minimise the latency :class:`ftmodel.oracle.CostOracle` predicts for that framework at
``--batch``. Candidates are built on the meta device; nothing is trained or run.

The accuracy proxy is a deliberately simple stand-in, not an accuracy: it grows with every
choice the space offers, with diminishing returns (wider stages, more blocks, larger expansion
and kernels all help, each less than the last). Swap in your own (a zero-cost proxy, a
supernet's validation accuracy); the point here is the latency objective.

After both searches, each front's candidates are also priced with the other framework, which
shows how much a front found for one framework loses when deployed with the other. Writes
``<out>.csv`` (every trial), ``<out>.png`` (both fronts) and ``<out>.md`` (summary).
"""

from __future__ import annotations

import argparse
import csv
import math
import sys
import time
import warnings
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ftmodel.oracle import CostOracle  # noqa: E402
from ftmodel.oracle.search_space import BASE_STAGES, CandidateConfig, MobileNetV2Space  # noqa: E402


def accuracy_proxy(cfg: CandidateConfig) -> float:
    """A monotone, diminishing-returns score of a candidate's capacity (see module docstring).

    Per stage: sqrt(width) × Σ over its blocks j of (1 + 0.15·log2(expansion) + 0.05·(kernel −
    3)) / (1 + 0.5·j) — the j-th extra block of a stage adds less than the one before.
    """
    score = 0.0
    for s in cfg.stages:
        score += math.sqrt(s.width) * sum(
            (1 + 0.15 * math.log2(b.expansion) + 0.05 * (b.kernel - 3)) / (1 + 0.5 * j)
            for j, b in enumerate(s.blocks))
    return score


def _default_profile() -> str:
    path = ROOT / "benchmarks" / "results" / "cpu-epyc" / "cpu-profile-zoo.json"
    try:
        from ftmodel.hardware.registry import load_profile
        prof = load_profile(str(path))
        if prof.host is not None and "onnxruntime" in prof.host.frameworks:
            return str(path)
    except Exception:  # noqa: BLE001 - fall back to this machine's default profile
        pass
    return "auto"


def _front(points: list[tuple[float, float]]) -> list[int]:
    """Indices of the non-dominated points (maximise [0], minimise [1]), by latency."""
    order = sorted(range(len(points)), key=lambda i: (points[i][1], -points[i][0]))
    out, best = [], -math.inf
    for i in order:
        if points[i][0] > best:
            out.append(i)
            best = points[i][0]
    return out


def search(framework: str, profile: str, space: MobileNetV2Space, trials: int, batch: int,
           seed: int) -> tuple[list[dict[str, Any]], CostOracle]:
    """One Optuna study; returns its trials (config, proxy, latency) and the oracle."""
    import optuna

    oracle = CostOracle(framework, profile)
    x = space.input_spec()
    rows: list[dict[str, Any]] = []

    def objective(trial: optuna.Trial) -> tuple[float, float]:
        cfg = space.suggest(trial)
        res = oracle.latencies({cfg: space.build(cfg, device="meta")}, batch, x)
        if res.failures:  # reported by the oracle with the configuration; skip the trial
            raise optuna.TrialPruned(res.failures[0].error)
        lat_ms = float(res.latency_s[0, 0]) * 1e3
        rows.append({"framework": framework, "trial": trial.number, "config": cfg.short(),
                     "cfg": cfg, "proxy": accuracy_proxy(cfg), "latency_ms": lat_ms})
        return rows[-1]["proxy"], lat_ms

    study = optuna.create_study(directions=["maximize", "minimize"],
                                sampler=optuna.samplers.TPESampler(seed=seed),
                                study_name=f"nas-{framework}")
    study.optimize(objective, n_trials=trials, show_progress_bar=True)
    return rows, oracle


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gpu", default=None, help="profile (default: this CPU's calibrated one)")
    ap.add_argument("--frameworks", default="eager,onnxruntime")
    ap.add_argument("--trials", type=int, default=120, help="trials per framework")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--resolution", type=int, default=128)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "local"
                                         / "nas-optuna-pareto"))
    args = ap.parse_args(argv)
    try:
        import optuna
    except ImportError:
        raise SystemExit("this example needs optuna: pip install 'ftmodel[examples]'")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)

    profile = args.gpu or _default_profile()
    fws = [f.strip() for f in args.frameworks.split(",") if f.strip()]
    if len(fws) != 2:
        raise SystemExit(f"--frameworks takes two names to compare, got {args.frameworks!r}")
    space = MobileNetV2Space(resolution=args.resolution)
    t0 = time.perf_counter()
    rows: dict[str, list[dict[str, Any]]] = {}
    oracles: dict[str, CostOracle] = {}
    for fw in fws:
        rows[fw], oracles[fw] = search(fw, profile, space, args.trials, args.batch, args.seed)
    search_s = time.perf_counter() - t0

    fronts = {fw: [rows[fw][i] for i in _front([(r["proxy"], r["latency_ms"])
                                                 for r in rows[fw]])] for fw in fws}
    # price each front with the other framework too
    x = space.input_spec()
    cross: dict[str, list[float]] = {}
    for fw, other in ((fws[0], fws[1]), (fws[1], fws[0])):
        res = oracles[other].latencies({r["cfg"]: space.build(r["cfg"], "meta")
                                        for r in fronts[fw]}, args.batch, x)
        got = {c: float(v) * 1e3 for c, v in zip(res.candidates, res.latency_s[:, 0])}
        cross[fw] = [got.get(r["cfg"], math.nan) for r in fronts[fw]]
    elapsed = time.perf_counter() - t0

    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    front_ids = {(fw, r["trial"]) for fw in fws for r in fronts[fw]}
    with open(out.with_suffix(".csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["framework", "trial", "config", "proxy", "latency_ms", "on_front",
                    "latency_ms_other_framework"])
        for fw in fws:
            other_ms = {r["trial"]: v for r, v in zip(fronts[fw], cross[fw])}
            for r in rows[fw]:
                w.writerow([fw, r["trial"], r["config"], f"{r['proxy']:.4f}",
                            f"{r['latency_ms']:.4f}", int((fw, r["trial"]) in front_ids),
                            f"{other_ms[r['trial']]:.4f}" if r["trial"] in other_ms else ""])

    # the same proxy targets on both fronts: the fastest candidate reaching each target
    lo = max(min(r["proxy"] for r in fronts[fw]) for fw in fws)
    hi = min(max(r["proxy"] for r in fronts[fw]) for fw in fws)
    targets = [lo + (hi - lo) * q for q in (0.0, 0.25, 0.5, 0.75, 1.0)]

    _plot(fws, rows, fronts, cross, out.with_suffix(".png"), profile, args.batch)
    a, b = fws
    shared = {r["config"] for r in fronts[a]} & {r["config"] for r in fronts[b]}
    lines = [
        f"# NAS with Optuna: the Pareto front depends on the framework ({a} vs {b})",
        "",
        "`python examples/nas_optuna.py" + "".join(
            f" {v}" for v in (sys.argv[1:] if argv is None else argv)) + "`",
        "",
        f"{args.trials} TPE trials per framework (seed {args.seed}) over the MobileNet-V2-style "
        f"space (resolution {args.resolution}, {len(BASE_STAGES)} stages), maximising a toy "
        f"accuracy proxy (`accuracy_proxy` in the script: capacity with diminishing returns, "
        f"not an accuracy) and minimising the latency `CostOracle` predicts at batch "
        f"{args.batch} with profile `{profile}`. Total time {elapsed:.0f} s (searches "
        f"{search_s:.0f} s).",
        "",
        f"Pareto fronts: {len(fronts[a])} candidates for {a}, {len(fronts[b])} for {b}; "
        f"{len(shared)} configurations on both.",
        "",
        f"Fastest front candidate reaching each proxy target, priced with both frameworks "
        f"(found by the {a} search / by the {b} search):",
        "",
        f"| proxy ≥ | {a} ms ({a}'s pick) | {a} ms ({b}'s pick) | {b} ms ({b}'s pick) | "
        f"{b} ms ({a}'s pick) |",
        "|---:|---:|---:|---:|---:|",
    ]
    for t in targets:
        a_own = _price_best(fronts[a], cross[a], t, own=True)
        b_own = _price_best(fronts[b], cross[b], t, own=True)
        a_on_b = _price_best(fronts[b], cross[b], t, own=False)  # b's pick, run with a
        b_on_a = _price_best(fronts[a], cross[a], t, own=False)  # a's pick, run with b
        lines.append(f"| {t:.2f} | {a_own:.2f} | {a_on_b:.2f} | {b_own:.2f} | {b_on_a:.2f} |")
    lines += [
        "",
        f"\"{a} ms ({b}'s pick)\": the candidate the {b} search would choose for that target "
        f"(its fastest on the {b} front), deployed with {a}; and vice versa.",
        "",
        f"![Pareto fronts]({out.with_suffix('.png').name})",
        "",
    ]
    out.with_suffix(".md").write_text("\n".join(lines))
    print("\n".join(lines))
    return 0


def _price_best(front: list[dict[str, Any]], other_ms: list[float], target: float,
                own: bool) -> float:
    """The other framework's latency of the candidate this front picks for ``target`` (its
    fastest candidate, by its own latency, reaching the target)."""
    ok = [(r["latency_ms"], i) for i, r in enumerate(front) if r["proxy"] >= target - 1e-9]
    if not ok:
        return math.nan
    i = min(ok)[1]
    return front[i]["latency_ms"] if own else other_ms[i]


def _plot(fws: list[str], rows: dict[str, list[dict[str, Any]]],
          fronts: dict[str, list[dict[str, Any]]], cross: dict[str, list[float]], path: Path,
          profile: str, batch: int) -> None:
    try:
        import matplotlib
    except ImportError:
        print("matplotlib not installed: no figure", file=sys.stderr)
        return
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.8))
    colors = {fws[0]: "tab:blue", fws[1]: "tab:orange"}
    for ax, fw in zip(axes, fws):
        other = fws[1] if fw == fws[0] else fws[0]
        ax.scatter([r["latency_ms"] for r in rows[fw]], [r["proxy"] for r in rows[fw]], s=8,
                   color="0.75", label=f"{fw} trials")
        own = sorted(fronts[fw], key=lambda r: r["latency_ms"])
        ax.step([r["latency_ms"] for r in own], [r["proxy"] for r in own], where="post",
                color=colors[fw], marker="o", ms=4, label=f"{fw} front ({fw} search)")
        # the other search's front, priced with this framework
        idx = sorted(range(len(fronts[other])), key=lambda i: cross[other][i])
        ax.scatter([cross[other][i] for i in idx], [fronts[other][i]["proxy"] for i in idx],
                   marker="x", color=colors[other], s=30,
                   label=f"{other} front, run with {fw}")
        ax.set_xlabel(f"predicted {fw} latency (ms, batch {batch})")
        ax.set_ylabel("accuracy proxy")
        ax.set_title(f"deployed with {fw}", fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="lower right")
    fig.suptitle(f"Pareto fronts by framework (profile {Path(profile).name})")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    raise SystemExit(main())
