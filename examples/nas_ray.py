"""Hardware-aware NAS on Ray Tune: Optuna's sampler proposes configurations, Ray runs the trials
on its workers, each pricing candidates from their configurations with its own cost oracle.

    pip install 'ftmodel[distributed]'
    python examples/nas_ray.py                                  # a local Ray, this machine's cores
    python examples/nas_ray.py --device a100 --trials 400
    python examples/nas_ray.py --address auto                   # an existing cluster
    python examples/nas_ray.py --kill-trial 20                  # a worker dies in trial 20

A multi-objective search (``ray.tune.search.optuna.OptunaSearch`` with Optuna's TPE sampler,
seeded) maximises ``examples/nas_optuna.py``'s accuracy proxy and minimises the latency
``CostOracle.latencies(configs, batch, space=space)`` predicts for the MobileNet-V2-style space
(:mod:`ftmodel.search_space`); nothing is built or run. The profile goes to the workers once,
through Ray's object store (``tune.with_parameters``; a calibrated CPU profile pickles to about
0.6 MB, a built-in GPU profile to 6 kB); each worker process makes its oracle on its first
trial and keeps it, with its block cache, for the next (``reuse_actors``). A trial whose worker
dies (``--kill-trial N``: the worker running trial ``N`` exits on its first attempt) is run
again by Ray (``FailureConfig(max_failures=2)``); finished trials are kept.

Writes ``<out>.csv`` (every trial) and ``<out>.md`` (summary and the Pareto front).
"""

from __future__ import annotations

import argparse
import csv
import math
import os
import pickle
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "examples"))

_ORACLE: dict[str, Any] = {}  # per worker process: the oracle, made on its first trial


def config_of(params: dict[str, Any]) -> Any:
    """The MobileNet-V2 configuration of a trial's parameters: the space's own ``suggest``
    replayed on them (``optuna.trial.FixedTrial``)."""
    import optuna

    from ftmodel.search_space import MobileNetV2Space
    return MobileNetV2Space().suggest(optuna.trial.FixedTrial(params))


class Define:
    """Optuna's define-by-run search space: the space's parameters, and the trial's number in
    the order proposed (a class: the searcher is pickled with it)."""

    def __init__(self, space: Any) -> None:
        self.space = space
        self.count = 0

    def __call__(self, trial: Any) -> dict[str, Any]:
        self.space.suggest(trial)
        self.count += 1
        return {"trial": self.count - 1}


def trainable(config: dict[str, Any], profile: Any = None,
              constants: dict[str, Any] | None = None) -> dict[str, float]:
    """One trial (``config``: the sampler's parameters and the trial's number): the candidate's
    predicted latency and accuracy proxy; ``profile`` and ``constants`` come through Ray's
    object store once."""
    from ftmodel.oracle import CostOracle
    from ftmodel.search_space import MobileNetV2Space
    from nas_optuna import accuracy_proxy

    c = constants or {}
    params = config
    if c["kill_trial"] >= 0 and params.get("trial") == c["kill_trial"]:
        marker = Path(c["marker_dir"]) / "killed"
        if not marker.exists():  # the first attempt only: its worker dies
            marker.touch()
            os._exit(1)
    space = MobileNetV2Space(resolution=c["resolution"])
    if "oracle" not in _ORACLE:
        _ORACLE["oracle"] = CostOracle(c["framework"], profile)
    cfg = config_of(params)
    res = _ORACLE["oracle"].latencies([cfg], [c["batch"]], space=space)
    if res.failures:
        raise RuntimeError(res.failures[0].error)
    return {"latency_ms": float(res.latency_s[0, 0]) * 1e3, "proxy": accuracy_proxy(cfg),
            "worker_pid": float(os.getpid())}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default=None, help="profile (default: this CPU's calibrated)")
    ap.add_argument("--framework", default="eager")
    ap.add_argument("--trials", type=int, default=200)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--resolution", type=int, default=160)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--address", default=None, help="an existing Ray cluster (default: local)")
    ap.add_argument("--kill-trial", type=int, default=-1)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "local" / "nas-ray"))
    args = ap.parse_args(argv)
    try:
        import optuna
        import ray
        from ray import tune
        from ray.tune.search.optuna import OptunaSearch
    except ImportError:
        raise SystemExit("this example needs ray[tune] and optuna: "
                         "pip install 'ftmodel[distributed]'")
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from ftmodel.hardware.registry import load_profile
    from ftmodel.search_space import MobileNetV2Space
    from oracle_speed import default_profile

    device = args.device or default_profile(args.framework)
    profile = load_profile(device)
    space = MobileNetV2Space(resolution=args.resolution)
    t0 = time.perf_counter()
    # the workers import this file and ftmodel: from this checkout (a cluster's nodes need it
    # at the same path, or ftmodel installed and this folder as Ray's working_dir)
    paths = os.pathsep.join(str(p) for p in (ROOT, ROOT / "examples", ROOT / "benchmarks"))
    ray.init(address=args.address, num_cpus=None if args.address else os.cpu_count(),
             include_dashboard=False, log_to_driver=False, logging_level="ERROR",
             runtime_env={"env_vars": {"PYTHONPATH": paths}})
    marker_dir = tempfile.mkdtemp(prefix="ftmodel-nas-ray-")
    search = OptunaSearch(space=Define(space), metric=["proxy", "latency_ms"], mode=["max", "min"],
                          sampler=optuna.samplers.TPESampler(seed=args.seed))
    constants = {"framework": args.framework, "batch": args.batch,
                 "resolution": args.resolution, "kill_trial": args.kill_trial,
                 "marker_dir": marker_dir}
    tuner = tune.Tuner(
        tune.with_parameters(trainable, profile=profile, constants=constants),
        tune_config=tune.TuneConfig(search_alg=search, num_samples=args.trials,
                                    reuse_actors=True),
        run_config=tune.RunConfig(storage_path=tempfile.mkdtemp(prefix="ftmodel-ray-"),
                                  verbose=0, failure_config=tune.FailureConfig(max_failures=2)))
    grid = tuner.fit()
    elapsed = time.perf_counter() - t0
    ray.shutdown()
    rows = []
    for r in grid:
        if r.error is None and r.metrics and "latency_ms" in r.metrics:
            rows.append({"trial": r.config["trial"], "config":
                         config_of(r.config).short(), "proxy": r.metrics["proxy"],
                         "latency_ms": r.metrics["latency_ms"],
                         "worker": int(r.metrics["worker_pid"])})
    rows.sort(key=lambda r: r["trial"])
    front, best = [], -math.inf
    for r in sorted(rows, key=lambda r: (r["latency_ms"], -r["proxy"])):
        if r["proxy"] > best:
            front.append(r)
            best = r["proxy"]
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out.with_suffix(".csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["trial", "config", "proxy", "latency_ms", "worker",
                                          "pareto"])
        w.writeheader()
        ids = {r["trial"] for r in front}
        w.writerows({**r, "pareto": int(r["trial"] in ids)} for r in rows)
    errors = sum(1 for r in grid if r.error is not None)
    where = f"cluster {args.address}" if args.address else f"a local Ray with {os.cpu_count()} CPUs"
    lines = [
        "# NAS on Ray Tune: OptunaSearch, the oracle on Ray's workers", "",
        "`" + " ".join(["python examples/nas_ray.py"] + (sys.argv[1:] if argv is None else argv))
        + "`", "",
        f"Framework `{args.framework}`, profile `{device}` ({len(pickle.dumps(profile)):,} "
        f"bytes pickled), batch {args.batch}, MobileNet-V2 space at {args.resolution} px; Ray "
        f"{ray.__version__}, {where}; candidates priced from their configurations.", "",
        f"- {len(rows)} of {args.trials} trials finished in {elapsed:.1f} s (Ray started, "
        f"workers' oracles made included), {errors} ended in an error, on "
        f"{len({r['worker'] for r in rows})} worker processes"
        + (f"; the worker of trial {args.kill_trial} was killed on its first attempt and the "
           f"trial run again" if args.kill_trial >= 0 else ""),
        f"- Pareto front: {len(front)} candidates", "",
        "| trial | proxy | latency ms | configuration |", "|---:|---:|---:|---|"]
    lines += [f"| {r['trial']} | {r['proxy']:.3f} | {r['latency_ms']:.3f} | `{r['config']}` |"
              for r in front]
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines[:9]))
    return 0 if len(rows) == args.trials else 1


if __name__ == "__main__":
    raise SystemExit(main())
