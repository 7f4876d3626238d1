"""How fast does the oracle price candidates from their configurations (nothing built)?

    python benchmarks/space_oracle_speed.py \
        --device benchmarks/results/cpu-epyc-turin/cpu-profile-124.json
    python benchmarks/space_oracle_speed.py --device a100
    python benchmarks/space_oracle_speed.py --space vit --resolution 128

``CostOracle.latencies(configs, batches, space=space)`` on the MobileNet-V2-style space
(:mod:`ftmodel.oracle.search_space`) or the ViT-style one (``--space vit``,
:mod:`ftmodel.oracle.vit_space`), eager, from a fresh oracle:

* **cold start**: the space's :meth:`~ftmodel.oracle.search_space.MobileNetV2Space.covering`
  configurations, which hold every block the space can make at every input it reaches: every
  block is built, traced and summarised once (at ``--batch``, and again at each of the eight
  batches of the last phase when that is timed);
* **warm, one batch**: ``--warm`` (20,000) new random configurations, in calls of ``--chunk``
  (1,000) as a search asks for a generation at a time; ``--repeats`` times, each repeat's rate
  reported and the median taken;
* **warm, eight batches** (1, 2, 4, ..., 128): the same configurations, each at all eight.

Against one live measurement of candidates of the same space on this CPU (eager, the same
batch, 2 threads, built with weights: ``benchmarks/oracle_speed.py``'s ``live_cost``, the
protocol of ``ftmodel.tools.validation``). Writes ``--out`` (.csv and -summary.md).
"""

from __future__ import annotations

import argparse
import platform
import random
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from ftmodel.measure import allocator_setting, cpu_name, keep_heap, set_threads  # noqa: E402
from ftmodel.oracle import CostOracle  # noqa: E402
from ftmodel.oracle.search_space import MobileNetV2Space  # noqa: E402
from ftmodel.oracle.vit_space import ViTSpace  # noqa: E402
from oracle_speed import default_profile, live_cost, write_rows  # noqa: E402

BATCHES8 = (1, 2, 4, 8, 16, 32, 64, 128)


def _rate(oracle: CostOracle, space: MobileNetV2Space | ViTSpace, cfgs: list,
          batches: list[int],
          chunk: int) -> tuple[float, bool]:
    """(candidates per second, all composed) over ``cfgs`` asked ``chunk`` at a time."""
    composed = True
    t0 = time.perf_counter()
    for i in range(0, len(cfgs), chunk):
        res = oracle.latencies(cfgs[i:i + chunk], batches, space=space)
        composed = composed and res.composed and not res.failures
    return len(cfgs) / (time.perf_counter() - t0), composed


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default=None, help="profile (default: this CPU's calibrated)")
    ap.add_argument("--space", choices=("mobilenetv2", "vit"), default="mobilenetv2")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--resolution", type=int, default=160)
    ap.add_argument("--warm", type=int, default=20000)
    ap.add_argument("--warm8", type=int, default=2000, help="candidates at eight batches")
    ap.add_argument("--chunk", type=int, default=1000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--live", type=int, default=3, help="candidates measured live")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "local"
                                         / "space-oracle-speed"))
    args = ap.parse_args(argv)
    threads = set_threads(args.threads)
    keep_heap()
    device = args.device or default_profile("eager")
    space: MobileNetV2Space | ViTSpace = (MobileNetV2Space(resolution=args.resolution)
                                          if args.space == "mobilenetv2"
                                          else ViTSpace(resolution=args.resolution))
    rng = random.Random(args.seed)
    oracle = CostOracle("eager", device)
    t0 = time.perf_counter()
    res = oracle.latencies(space.covering(), [args.batch], space=space)
    cold_s = time.perf_counter() - t0
    blocks = len(oracle._space_pricer() or ())  # noqa: SLF001 - a figure for the report
    warm = [space.sample(rng) for _ in range(args.warm)]
    rates, ok = [], res.composed
    for _ in range(args.repeats):
        r, c = _rate(oracle, space, warm, [args.batch], args.chunk)
        rates.append(r)
        ok = ok and c
    t0 = time.perf_counter()
    oracle.latencies(space.covering(), list(BATCHES8), space=space)
    cold8_s = time.perf_counter() - t0
    rates8 = []
    for _ in range(args.repeats):
        r, c = _rate(oracle, space, warm[:args.warm8], list(BATCHES8), args.chunk)
        rates8.append(r)
        ok = ok and c
    live = [live_cost(space, warm[i * 997 % len(warm)], args.batch, 5, 0.1)
            for i in range(args.live)]
    live_pass = statistics.median(m for m, _ in live)
    live_total = statistics.median(t for _, t in live)
    rate, rate8 = statistics.median(rates), statistics.median(rates8)
    name = oracle.predictor.profile.name
    rows = [{"phase": "cold start (covering set)", "batches": 1, "candidates": len(res),
             "seconds": cold_s, "candidates_per_s": len(res) / cold_s},
            {"phase": "warm", "batches": 1, "candidates": args.warm,
             "seconds": args.warm / rate, "candidates_per_s": rate},
            {"phase": "cold start, 8 batches", "batches": 8, "candidates": len(res),
             "seconds": cold8_s, "candidates_per_s": len(res) / cold8_s},
            {"phase": "warm, 8 batches", "batches": 8, "candidates": args.warm8,
             "seconds": args.warm8 / rate8, "candidates_per_s": rate8}]
    out = write_rows(Path(args.out), rows)
    lines = [
        "# NAS oracle from configurations: speed", "",
        "`" + " ".join(["python benchmarks/space_oracle_speed.py"]
                       + (sys.argv[1:] if argv is None else argv)) + "`", "",
        f"{'MobileNet-V2' if args.space == 'mobilenetv2' else 'ViT'}-style space "
        f"(`ftmodel.search_space`, resolution {args.resolution}), "
        f"eager, profile `{name}` ({device}), batch {args.batch}, fp32; candidates priced from "
        f"their configurations (`CostOracle.latencies(configs, batches, space=space)`), "
        f"{args.chunk} per call. Host: {cpu_name()}, {threads} torch threads, torch "
        f"{torch.__version__}, Python {platform.python_version()}. Every candidate composed "
        f"from block summaries: {ok}.", "",
        "| phase | batches | candidates | seconds | candidates/s |", "|---|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['phase']} | {r['batches']} | {r['candidates']} | "
                     f"{r['seconds']:.2f} | {r['candidates_per_s']:,.0f} |")
    lines += [
        "", f"Blocks summarised after the cold start: {blocks} (block × input shape). "
        f"Warm repeats (candidates/s): one batch {', '.join(f'{r:,.0f}' for r in rates)}; "
        f"eight batches {', '.join(f'{r:,.0f}' for r in rates8)}.", "",
        f"**One live measurement** of {args.live} of the candidates on this CPU (eager, batch "
        f"{args.batch}, {threads} threads, allocator: {allocator_setting()}): one forward pass "
        f"{1e3 * live_pass:.1f} ms; one measurement as `ftmodel validate` makes it (weights "
        f"built, 2 warm-up calls, 5 rounds of ≥0.1 s, fastest round's median) "
        f"{1e3 * live_total:.0f} ms. One warm prediction costs {1e6 / rate:.0f} µs: "
        f"**{live_total * rate:,.0f}× cheaper than one measurement**, "
        f"{live_pass * rate:,.0f}× cheaper than one forward pass.", ""]
    out.with_name(out.name + "-summary.md").write_text("\n".join(lines))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
