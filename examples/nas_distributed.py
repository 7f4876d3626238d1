"""Hardware-aware NAS on several processes: Optuna's RDB storage shares one study between
workers, each pricing candidates from their configurations with its own cost oracle.

    pip install 'ftmodel[nas]'
    python examples/nas_distributed.py                         # 2 workers, this CPU, SQLite
    python examples/nas_distributed.py --device a100 --workers 4 --trials 2000
    python examples/nas_distributed.py --storage postgresql://user:pw@host/db   # many machines
    python examples/nas_distributed.py --kill-after 50         # one worker dies mid-trial

A multi-objective study (TPE, seeded) maximises ``examples/nas_optuna.py``'s accuracy proxy
and minimises the latency ``CostOracle.latencies(configs, batch, space=space)`` predicts for
the MobileNet-V2-style space (:mod:`ftmodel.search_space`), nothing built or run. The study
lives in an Optuna RDB storage (by default SQLite in a temporary folder, removed at the end;
``--storage`` any SQLAlchemy URL: a SQLite file to keep, PostgreSQL for workers on several
machines). Each worker process gets the
framework and the profile (plain data: a calibrated CPU profile pickles to about 0.6 MB, a
fresh oracle to 0.65 MB, a built-in GPU profile to 6 kB), makes its oracle, warms its block
cache once (``space.covering()``) and asks for trials until the study holds ``--trials``
finished ones.

A worker that dies (``--kill-after N``: the first worker to finish ``N`` trials exits in the
middle of its next one) leaves a running trial behind; the storage's heartbeat marks it failed
after ``--grace-s`` and ``optuna.storages.RetryFailedTrialCallback`` enqueues it again for the
others: no finished trial is lost (``RetryHeartbeatStaleTrialCallback`` from optuna 4.9 on). Ray
Tune (``OptunaSearch`` over a local or remote Ray cluster) is the heavier alternative for
clusters Ray already manages; see docs/api.md.

Writes ``<out>.csv`` (every finished trial), ``<out>.md`` (summary, the Pareto front).
"""

from __future__ import annotations

import argparse
import csv
import multiprocessing as mp
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "examples"))

STUDY = "ftmodel-nas"


def _storage(url: str, grace_s: int) -> Any:
    """The study's storage, with a heartbeat: a trial whose worker stops beating for
    ``grace_s`` seconds is failed and enqueued again (at most 3 times)."""
    import warnings

    from optuna import storages
    with warnings.catch_warnings():  # the retry callback is marked experimental
        warnings.simplefilter("ignore")
        retry = getattr(storages, "RetryHeartbeatStaleTrialCallback", None)
        if retry is not None:  # optuna 4.9 on
            return storages.RDBStorage(url, heartbeat_interval=1, grace_period=grace_s,
                                       heartbeat_stale_trial_callback=retry(max_retry=3))
        return storages.RDBStorage(url, heartbeat_interval=1, grace_period=grace_s,
                                   failed_trial_callback=storages.RetryFailedTrialCallback(
                                       max_retry=3))


def _first(marker: str) -> bool:
    """Whether this process is the first to get here (it creates ``marker``)."""
    try:
        os.close(os.open(marker, os.O_CREAT | os.O_EXCL))
        return True
    except FileExistsError:
        return False


def worker(index: int, url: str, framework: str, device: Any, batch: int, resolution: int,
           trials: int, seed: int, grace_s: int, kill_after: int, marker: str) -> None:
    """One worker process: its own oracle, trials until the study holds ``trials`` finished."""
    import optuna
    from optuna.study import MaxTrialsCallback
    from optuna.trial import TrialState

    from ftmodel.oracle import CostOracle
    from ftmodel.search_space import MobileNetV2Space
    from nas_optuna import accuracy_proxy

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    space = MobileNetV2Space(resolution=resolution)
    oracle = CostOracle(framework, device)
    oracle.latencies(space.covering(), [batch], space=space)  # every block summarised once
    done = 0

    def objective(trial: optuna.Trial) -> tuple[float, float]:
        nonlocal done
        cfg = space.suggest(trial)
        if kill_after and done == kill_after and _first(marker):
            os._exit(1)  # dies in the middle of a trial, as a lost machine does
        res = oracle.latencies([cfg], [batch], space=space)
        if res.failures:
            raise optuna.TrialPruned(res.failures[0].error)
        trial.set_user_attr("config", cfg.short())
        done += 1
        return accuracy_proxy(cfg), float(res.latency_s[0, 0]) * 1e3

    study = optuna.load_study(study_name=STUDY, storage=_storage(url, grace_s),
                              sampler=optuna.samplers.TPESampler(seed=seed + index))
    study.optimize(objective, callbacks=[MaxTrialsCallback(trials, states=(TrialState.COMPLETE,))])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default=None, help="profile (default: this CPU's calibrated)")
    ap.add_argument("--framework", default="eager")
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--trials", type=int, default=400, help="finished trials in the study")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--resolution", type=int, default=160)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--storage", default=None, help="an SQLAlchemy URL (default: SQLite)")
    ap.add_argument("--grace-s", type=int, default=5, help="heartbeat grace period")
    ap.add_argument("--kill-after", type=int, default=0,
                    help="the first worker to finish this many trials dies during its next")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "local"
                                         / "nas-distributed"))
    args = ap.parse_args(argv)
    try:
        import optuna
    except ImportError:
        raise SystemExit("this example needs optuna: pip install 'ftmodel[nas]'")
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from oracle_speed import default_profile

    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = None if args.storage else tempfile.TemporaryDirectory(prefix="ftmodel-nas-")
    url = args.storage or f"sqlite:///{Path(tmp.name) / 'study.db'}"  # type: ignore[union-attr]
    device = args.device or default_profile(args.framework)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    optuna.create_study(study_name=STUDY, storage=_storage(url, args.grace_s),
                        directions=["maximize", "minimize"], load_if_exists=True)
    t0 = time.perf_counter()
    kill_dir = tempfile.TemporaryDirectory(prefix="ftmodel-nas-kill-")
    marker = str(Path(kill_dir.name) / "killed")  # created by the worker that dies
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=worker, args=(i, url, args.framework, device, args.batch,
                                              args.resolution, args.trials, args.seed,
                                              args.grace_s, args.kill_after, marker))
             for i in range(args.workers)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    elapsed = time.perf_counter() - t0
    study = optuna.load_study(study_name=STUDY, storage=url)
    trials = study.get_trials(deepcopy=False)
    done = [t for t in trials if t.state == optuna.trial.TrialState.COMPLETE]
    failed = [t for t in trials if t.state == optuna.trial.TrialState.FAIL]
    retried = [t for t in trials if "failed_trial" in t.system_attrs]
    front = sorted(study.best_trials, key=lambda t: t.values[1])
    with open(out.with_suffix(".csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["trial", "config", "proxy", "latency_ms", "pareto"])
        ids = {t.number for t in front}
        for t in done:
            w.writerow([t.number, t.user_attrs.get("config", ""), f"{t.values[0]:.4f}",
                        f"{t.values[1]:.4f}", int(t.number in ids)])
    lines = [
        "# Distributed NAS: Optuna RDB storage, several worker processes", "",
        "`" + " ".join(["python examples/nas_distributed.py"]
                       + (sys.argv[1:] if argv is None else argv)) + "`", "",
        f"Framework `{args.framework}`, profile `{device}`, batch {args.batch}, MobileNet-V2 "
        f"space at {args.resolution} px, {args.workers} worker processes sharing one study "
        f"({'SQLite' if args.storage is None else 'the given storage'}); candidates priced "
        f"from their configurations. Workers that died: "
        f"{sum(p.exitcode != 0 for p in procs)} of {len(procs)}.", "",
        f"- {len(done)} finished trials in {elapsed:.1f} s (workers started, oracles made and "
        f"warmed included), {len(failed)} failed, {len(retried)} re-run after a failure",
        f"- Pareto front: {len(front)} candidates", "",
        "| trial | proxy | latency ms | configuration |", "|---:|---:|---:|---|"]
    lines += [f"| {t.number} | {t.values[0]:.3f} | {t.values[1]:.3f} | "
              f"`{t.user_attrs.get('config', '')}` |" for t in front]
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines[:9]))
    if tmp is not None:
        tmp.cleanup()
    kill_dir.cleanup()
    return 0 if len(done) >= args.trials else 1


if __name__ == "__main__":
    raise SystemExit(main())
