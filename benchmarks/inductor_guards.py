"""What dynamo's guards cost on each call of a compiled module, by its modules and tensors, warm
and after the cache is flushed: compiled chains of K modules that inductor fuses into one
generated kernel, the guard evaluation's own profiler event timed.

    python benchmarks/inductor_guards.py --out benchmarks/results/cpu-epyc/inductor-guards.md

dynamo checks its guards on every call of a compiled module (every module and tensor the graph
reads) before inductor's wrapper runs; ftmodel prices a call at the profile's ``per_call_s``,
fitted on tiny programs of a few modules, warm. Chains: K ``nn.ReLU`` modules (no tensors), K
``nn.BatchNorm1d`` (four tensors each), K ``nn.Sequential(nn.ReLU())`` (two modules each, one
nested), on a 4-element input: one generated kernel of a few elements. Each is called 30 times under
``torch.profiler`` back to back (warm) and with 64 MB written before each call (cold), and the
mean self time of its "TorchDynamo Cache Lookup" event (the guard evaluation: one event a call,
so the profiler's own cost is small) is reported, with the whole call's wall time, warm,
without the profiler. Nothing is predicted.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ftmodel.frameworks.inductor import keep_runners_compiled  # noqa: E402
from ftmodel.measure import keep_heap, measure_interleaved  # noqa: E402

GUARDS = "TorchDynamo Cache Lookup"
CALLS = 30

SIZES = (1, 8, 32, 128)
KINDS: dict[str, Callable[[], nn.Module]] = {
    "relu": nn.ReLU, "batchnorm": lambda: nn.BatchNorm1d(4),
    "nested": lambda: nn.Sequential(nn.ReLU())}


def _chain(kind: str, k: int) -> tuple[nn.Module, torch.Tensor]:
    model = nn.Sequential(*[KINDS[kind]() for _ in range(k)]).eval().requires_grad_(False)
    return model, torch.randn(2, 4)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=None, help="a markdown table to write")
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    torch.set_num_threads(2)
    keep_heap()
    keep_runners_compiled()
    flush_buf = torch.zeros(16 * 1024 * 1024)  # 64 MB

    def flush() -> None:
        flush_buf.add_(1.0)

    fns: dict[tuple[str, int], Callable[[], object]] = {}
    rows: dict[tuple[str, int], tuple[int, int, float, float]] = {}
    for kind in KINDS:
        for k in SIZES:
            model, x = _chain(kind, k)
            compiled = torch.compile(model, backend="inductor", dynamic=False)
            fn = (lambda c, x: lambda: c(x))(compiled, x)
            with torch.no_grad():
                fn()
                guards = [_guard_s(fn, flush if cold else None) for cold in (False, True)]
            fns[(kind, k)] = fn
            rows[(kind, k)] = (sum(1 for _ in model.modules()),
                               sum(1 for _ in model.parameters())
                               + sum(1 for _ in model.buffers()), *guards)
    with torch.no_grad():
        m = measure_interleaved(fns, rounds=args.rounds, round_s=0.05, max_reps=400)
    lines = ["| chain | K | modules | tensors | call, warm µs | guards, warm µs | guards after a "
             "64 MB flush µs |", "|---|---|---|---|---|---|---|"]
    for (kind, k), (mods, tensors, warm, cold) in rows.items():
        lines.append(f"| {kind} | {k} | {mods} | {tensors} | {m[(kind, k)].time_s * 1e6:.1f} | "
                     f"{warm * 1e6:.1f} | {cold * 1e6:.1f} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        Path(args.out).write_text("`python benchmarks/inductor_guards.py` (2 threads)\n\n" + text)


def _guard_s(fn: Callable[[], object], before: Callable[[], None] | None) -> float:
    """Mean seconds of the guard evaluation's profiler event over ``CALLS`` calls of ``fn``,
    ``before`` called ahead of each."""
    from torch.profiler import profile

    for _ in range(3):
        fn()
    with profile() as prof:
        for _ in range(CALLS):
            if before is not None:
                before()
            fn()
    total = sum(e.self_cpu_time_total for e in prof.key_averages() if e.key == GUARDS)
    return float(total) / CALLS * 1e-6


if __name__ == "__main__":
    main()
