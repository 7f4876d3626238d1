"""What dynamo's guards cost on each call of a compiled module, by its modules and tensors, warm
and after the cache is flushed: compiled chains of K modules that inductor fuses into one
generated kernel, the guard evaluation's own profiler event timed.

    python benchmarks/inductor_guards.py --out benchmarks/results/cpu-epyc/inductor-guards.md
    python benchmarks/inductor_guards.py --profile P.json --models ghostnet_100@112,resnet34@96
    python benchmarks/inductor_guards.py --profile P.json --networks


dynamo checks its guards on every call of a compiled module (every module and tensor the graph
reads) before inductor's wrapper runs; ftmodel prices a call at the profile's ``per_call_s``,
fitted on tiny programs of a few modules, warm. Chains: K ``nn.ReLU`` modules (no tensors), K
``nn.BatchNorm1d`` (four tensors each), K ``nn.Sequential(nn.ReLU())`` (two modules each, one
nested), on a 4-element input: one generated kernel of a few elements. Each is called 30 times under
``torch.profiler`` back to back (warm) and with 64 MB written before each call (cold), and the
mean self time of its "TorchDynamo Cache Lookup" event (the guard evaluation: one event a call,
so the profiler's own cost is small) is reported, with the whole call's wall time, warm,
without the profiler. Nothing is predicted.

With ``--profile`` and ``--models`` (corpus models), each model is compiled instead and called
back to back under the profiler at ``--batch``, as a timing loop calls it (its own kernels are
what runs between two guard evaluations), and its guards' mean seconds a call are set beside
what the profile's guard prices give for the tensors and modules the lowering counts, at the
bytes its program touches (``ftmodel.estimate.guards``). With ``--networks`` instead, the
calibration's own synthetic networks of inductor's in-model stage (``calibration.networks``, at
its two batches) are measured and priced so, and ``c + a·tensors + b·modules`` is fitted to
their measured guards by non-negative least squares (per batch and over both), and so is
``c + s·priced`` (one factor on the profile's rows; ``refit_in_model.py --guards-in-model``
prices measured points with it).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ftmodel.calibration.guards import guard_event_s  # noqa: E402
from ftmodel.frameworks.inductor import keep_runners_compiled  # noqa: E402
from ftmodel.measure import keep_heap, measure_interleaved  # noqa: E402
from ftmodel.program import Program  # noqa: E402


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
    ap.add_argument("--profile", default=None, help="a profile with guard prices (--models)")
    ap.add_argument("--models", default=None, help="comma-separated corpus models")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--networks", action="store_true",
                    help="the calibration's synthetic networks instead (needs --profile)")
    args = ap.parse_args()
    torch.set_num_threads(2)
    keep_heap()
    keep_runners_compiled()
    if args.models or args.networks:
        _models(args)
        return
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
                guards = [guard_event_s(fn, flush if cold else None) for cold in (False, True)]
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


def _models(args: argparse.Namespace) -> None:
    """Each corpus model's guards measured, back to back, against the profile's price."""
    from ftmodel.estimate.guards import bytes_touched, guard_seconds
    from ftmodel.frameworks.base import get_framework
    from ftmodel.hardware.profile import read_profile
    from ftmodel.program import GUARD_MODULE, GUARD_TENSOR

    assert args.profile, "--models and --networks need --profile"
    prof = read_profile(args.profile)
    assert prof.host is not None
    rows = prof.host.frameworks["inductor"].guards
    fw = get_framework("inductor")
    assert fw.runner is not None
    what = "--networks" if args.networks else f"--models {args.models} --batch {args.batch}"
    lines = [f"`python benchmarks/inductor_guards.py --profile {args.profile} {what}` "
             "(2 threads)", "",
             "| model | tensors | modules | MB a call | guards measured µs | predicted µs | "
             "predicted / measured |", "|---|---|---|---|---|---|---|"]
    fit: dict[int, list[tuple[int, int, float]]] = {}
    priced: list[tuple[float, float]] = []
    for name, run, prog in (_networks(prof) if args.networks else _corpus(args, fw)):
        with torch.no_grad():
            measured = guard_event_s(run, None)
        predicted = guard_seconds(prog.host_events, prog.kernels, rows)
        tensors, modules = (prog.host_events.get(GUARD_TENSOR, 0),
                            prog.host_events.get(GUARD_MODULE, 0))
        fit.setdefault(prog.batch or 0, []).append((tensors, modules, measured))
        priced.append((predicted, measured))
        lines.append(f"| {name} | {tensors} | {modules} | "
                     f"{bytes_touched(prog.kernels) / 1e6:.1f} | {measured * 1e6:.0f} | "
                     f"{predicted * 1e6:.0f} | {predicted / measured:.2f} |")
        print(lines[-1], flush=True)
    if args.networks:
        from ftmodel.calibration.guards import fit_guard_prices, fit_guard_scale

        scale, constant = fit_guard_scale([p[0] for p in priced], [p[1] for p in priced])
        lines += ["", f"- the profile's rows at the networks' level: x{scale:.2f} (constant "
                  f"{constant * 1e6:.1f} µs; `in_model_guard_scale`'s factor, which a "
                  "calibration does not apply)"]
        for label, pts in [*((f"batch {b}", v) for b, v in sorted(fit.items())),
                           ("both batches", [p for v in fit.values() for p in v])]:
            t, m = fit_guard_prices([p[0] for p in pts], [p[1] for p in pts],
                                    [p[2] for p in pts])
            lines.append(f"- {label}: {t * 1e6:.3f} µs a tensor, {m * 1e6:.3f} µs a module "
                         "(with a constant)")
    text = "\n".join(lines) + "\n"
    if args.out:
        Path(args.out).write_text(text)


def _corpus(args: argparse.Namespace, fw: Any) -> Iterator[tuple[str, Callable[[], object],
                                                                 Program]]:
    """(name, runner, program) of each corpus model of ``--models`` at ``--batch``."""
    from ftmodel.tools.corpus import get_corpus_model
    from ftmodel.tracing.dispatch import trace

    for name in args.models.split(","):
        zm = get_corpus_model(name)
        model = zm.build().eval()
        b = args.batch
        run = fw.runner(model, zm.make_inputs, b, device="cpu", dtype="fp32")
        yield name, run, fw.program(model, zm.make_inputs, b, trace(model, zm.make_inputs, b),
                                    device="cpu", dtype="fp32")


def _networks(prof: Any) -> Iterator[tuple[str, Callable[[], object], Program]]:
    """(name, runner, program) of each synthetic network of inductor's in-model stage."""
    from ftmodel.calibration.in_model_cpu import in_model_networks

    nets = in_model_networks(prof, "cpu", False, "inductor")
    for key, prog in nets.programs.items():
        yield f"{key[0]} b{key[1]}", nets.fns[key], prog


if __name__ == "__main__":
    main()
