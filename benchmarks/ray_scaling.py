"""The search-space oracle on Ray workers: candidates per second from 1 to N workers, and what
a task costs.

    python benchmarks/ray_scaling.py --device benchmarks/results/cpu-epyc-turin/cpu-profile-124.json

Each worker is a Ray actor holding one ``CostOracle`` (eager, the profile sent once through the
object store), its block cache warmed with the space's covering configurations before the
clock starts. ``--candidates`` random MobileNet-V2 configurations are split into chunks of
``--chunk`` (as plain tuples, ``MobileNetV2Space.encode``) and handed to the workers round
robin; a worker decodes a chunk and prices it with
``oracle.latencies(chunk, [batch], space=space)`` and returns the latencies. Timed, for 1 to
``--workers`` workers: the wall time from sending the first chunk to receiving the last, over
``--repeats`` repeats (median). The cost of a task alone: ``--pings`` calls of an empty actor
method, one after the other (round trip), and the pickled size of one chunk of configurations.
Writes ``--out`` (.csv and -summary.md); the summary projects a cluster from these figures.
"""

from __future__ import annotations

import argparse
import gc
import os
import pickle
import platform
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from oracle_speed import write_rows  # noqa: E402


class OracleWorker:
    """A Ray actor's state: one oracle for the whole benchmark, warmed on creation."""

    def __init__(self, profile: Any, resolution: int, batch: int) -> None:
        import torch

        from ftmodel.oracle import CostOracle
        from ftmodel.search_space import MobileNetV2Space
        torch.set_num_threads(1)
        self.space = MobileNetV2Space(resolution=resolution)
        self.batch = batch
        self.oracle = CostOracle("eager", profile)
        self.oracle.latencies(self.space.covering(), [batch], space=self.space)

    def _decoded(self, plain: list[Any]) -> list[Any]:
        # the collector paused: tens of thousands of small objects would set off its full
        # passes over the worker's heap (2,000 configurations: 28 ms, 160 ms with it running)
        gc.disable()
        try:
            return [self.space.decode(p) for p in plain]
        finally:
            gc.enable()

    def price(self, plain: list[Any]) -> Any:
        configs = self._decoded(plain)
        return self.oracle.latencies(configs, [self.batch], space=self.space).latency_s

    def ping(self) -> None:
        return None

    def take(self, plain: list[Any]) -> int:
        """A chunk received and decoded, not priced: what a task costs besides pricing."""
        return len(self._decoded(plain))

    def price_timed(self, plain: list[Any]) -> float:
        """Seconds the worker spends pricing one decoded chunk."""
        configs = self._decoded(plain)
        t0 = time.perf_counter()
        self.oracle.latencies(configs, [self.batch], space=self.space)
        return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", required=True, help="a profile")
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--candidates", type=int, default=40000)
    ap.add_argument("--chunk", type=int, default=2000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--pings", type=int, default=500)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--resolution", type=int, default=160)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "local"
                                         / "ray-scaling"))
    args = ap.parse_args(argv)
    import ray

    from ftmodel.hardware.registry import load_profile
    from ftmodel.search_space import MobileNetV2Space

    profile = load_profile(args.device)
    space = MobileNetV2Space(resolution=args.resolution)
    rng = random.Random(0)
    # sent as plain tuples (MobileNetV2Space.encode): Ray pickles them 20x faster
    configs = [space.encode(space.sample(rng)) for _ in range(args.candidates)]
    chunks = [configs[i:i + args.chunk] for i in range(0, len(configs), args.chunk)]
    paths = os.pathsep.join(str(p) for p in (ROOT, ROOT / "benchmarks"))
    ray.init(num_cpus=args.workers, include_dashboard=False, log_to_driver=False,
             logging_level="ERROR", runtime_env={"env_vars": {"PYTHONPATH": paths}})
    ref = ray.put(profile)
    actor = ray.remote(num_cpus=1)(OracleWorker)
    rows = []
    for n in range(1, args.workers + 1):
        workers = [actor.remote(ref, args.resolution, args.batch) for _ in range(n)]
        ray.get([w.ping.remote() for w in workers])  # made and warmed
        times = []
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            ray.get([workers[i % n].price.remote(c) for i, c in enumerate(chunks)])
            times.append(time.perf_counter() - t0)
        t = statistics.median(times)
        rows.append({"workers": n, "candidates": len(configs), "seconds": t,
                     "candidates_per_s": len(configs) / t,
                     "repeats_s": " ".join(f"{x:.3f}" for x in times)})
        for w in workers:
            ray.kill(w)
    pinger = actor.remote(ref, args.resolution, args.batch)
    ray.get(pinger.ping.remote())
    t0 = time.perf_counter()
    for _ in range(args.pings):
        ray.get(pinger.ping.remote())
    ping_s = (time.perf_counter() - t0) / args.pings
    t0 = time.perf_counter()
    for c in chunks:
        ray.get(pinger.take.remote(c))
    take_s = (time.perf_counter() - t0) / len(chunks)
    inside_s = statistics.median(ray.get(pinger.price_timed.remote(c)) for c in chunks[:5])
    chunk_bytes = len(pickle.dumps(chunks[0]))
    profile_bytes = len(pickle.dumps(profile))
    version = ray.__version__
    ray.shutdown()
    out = write_rows(Path(args.out), rows)
    one = rows[0]["candidates_per_s"]
    chunk_s = args.chunk / one
    lines = [
        "# The search-space oracle on Ray workers: scaling", "",
        "`" + " ".join(["python benchmarks/ray_scaling.py"]
                       + (sys.argv[1:] if argv is None else argv)) + "`", "",
        f"Ray {version}, local, {args.workers} CPUs; one actor per worker, one torch thread "
        f"each, an eager `CostOracle` on `{profile.name}` ({profile_bytes:,} bytes pickled, sent "
        f"once) warmed with the covering configurations; {args.candidates:,} random MobileNet-V2 "
        f"configurations at {args.resolution} px in chunks of {args.chunk} "
        f"(`MobileNetV2Space.encode`d: {chunk_bytes:,} bytes pickled each; decoded by the "
        f"worker), batch {args.batch}. Host: "
        f"{platform.machine()}, Python {platform.python_version()}.", "",
        "| workers | seconds (median) | candidates/s | repeats (s) |", "|---:|---:|---:|---|"]
    lines += [f"| {r['workers']} | {r['seconds']:.3f} | {r['candidates_per_s']:,.0f} | "
              f"{r['repeats_s']} |" for r in rows]
    lines += [
        "", f"A task's round trip (an empty actor method, called {args.pings} times one after "
        f"the other): {1e3 * ping_s:.2f} ms; with a chunk sent and decoded but not priced: "
        f"{1e3 * take_s:.0f} ms; pricing the decoded chunk inside the worker: "
        f"{1e3 * inside_s:.0f} ms ({args.chunk / inside_s:,.0f} candidates/s); one chunk end "
        f"to end with one worker: {1e3 * chunk_s:.0f} ms. What a task costs besides pricing "
        "is the chunk's trip (the driver pickling it, the worker decoding it), not Ray's "
        "scheduling.", "",
        "**Projection (on paper, not measured):** a cluster of 100 nodes of this machine's "
        f"kind runs {100 * args.workers} workers; each prices about {one:,.0f} candidates/s "
        f"(the one-worker figure), and the driver sends {1 / chunk_s:,.0f} chunks/s per "
        f"worker of {chunk_bytes / 1e6:.2f} MB, that is "
        f"{100 * args.workers * chunk_bytes / chunk_s / 1e6:,.0f} MB/s in all. Where the "
        f"driver's network and Ray's scheduler keep up with that (larger chunks lower both), "
        f"the cluster answers about {100 * args.workers * one * chunk_s / (chunk_s + ping_s):,.0f}"
        " candidates/s; a search whose sampler proposes fewer per second than that is bound by "
        "its sampler, not by the oracle.", ""]
    out.with_name(out.name + "-summary.md").write_text("\n".join(lines))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
