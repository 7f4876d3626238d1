"""What a small op's call costs right after a kernel that streamed S bytes.

    python benchmarks/host_path_after_stream.py --sizes-kib 0,64,1024,4096,8192,16384,65536

Each op below runs on a (1, 256) tensor, whose bytes stay in the L1 cache, right after an
untimed parallel reduction over S KiB (``buf.sum()``, as ``ftmodel.measure.cache_flusher``
flushes; S = 0: right after another call of the op, as the calibration's sweeps time it). What
grows with S is the cost of the call's own path (Python, the dispatcher, the allocator, the
kernel's code) once the stream has pushed it out of the caches. Each (S, op) is the median of
``--calls`` calls, each right after its stream (``ftmodel.measure.measure_cold_interleaved``
with the stream as its flush), in ``--rounds`` rounds interleaved over the sizes; prints each
one's median over the rounds in µs and how far its rounds lie apart.
2 threads; nothing is written.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Callable
from functools import partial
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ftmodel.measure import measure_cold_interleaved, set_threads  # noqa: E402

def _nothing() -> None:
    """S = 0: no stream, the op follows its own previous call."""


OPS: dict[str, Callable[[torch.Tensor], object]] = {
    "relu": F.relu, "add": partial(torch.add, other=1.0), "gelu": F.gelu, "tanh": torch.tanh}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes-kib", default="0,64,256,1024,4096,8192,16384,65536")
    ap.add_argument("--ops", default="relu,add,gelu,tanh")
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    set_threads(2)
    sizes = [int(s) for s in args.sizes_kib.split(",")]
    x = torch.randn(1, 256)
    ops = {name: partial(OPS[name], x) for name in args.ops.split(",")}
    streams = {s: partial(torch.sum, torch.ones(s * 256)) if s else _nothing for s in sizes}
    times: dict[tuple[int, str], list[float]] = {(s, o): [] for s in sizes for o in ops}
    with torch.no_grad():
        for _ in range(args.rounds):  # rounds interleaved over the sizes
            for s in sizes:
                # each call right after an untimed stream: the cold-operand timing itself
                for name, m in measure_cold_interleaved(ops, flush=streams[s], rounds=1,
                                                        reps=args.calls).items():
                    times[(s, name)].append(m.time_s * 1e6)
    print("| streamed before (KiB) | " + " | ".join(ops) + " |")
    print("|---|" + "---|" * len(ops))
    for s in sizes:
        cells = [f"{statistics.median(times[(s, o)]):.1f} "
                 f"({max(times[(s, o)]) / min(times[(s, o)]) - 1:.0%})" for o in ops]
        print(f"| {s} | " + " | ".join(cells) + " |")
    print(f"µs per call, median of {args.rounds} rounds of {args.calls} calls "
          "(in brackets: slowest round / fastest − 1)")


if __name__ == "__main__":
    main()
