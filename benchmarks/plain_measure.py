"""Measure one corpus model in this process as a user would: a plain Python process, nothing set
but torch's thread count, timed with ``torch.utils.benchmark.Timer``.

    python benchmarks/plain_measure.py --model resnet34@96 --framework eager --batches 1,4,16

Prints one JSON object on stdout: per batch, the fastest round's median (``time_s``), every
round's median, the minor page faults per call, and the machine's speed around the rounds: the
reference GEMM, the host reference and the memory reference of :mod:`ftmodel.speed` timed before
the first round and after each (``round_references_s``, ``round_host_references_s`` and
``round_memory_references_s``, one more than rounds), with which ``benchmarks/corpus.py``
expresses the time at its calibration's speed and reports the memory speed it ran at. Batches run in ascending order, each warmed
up and then timed in ``--rounds`` rounds of ``Timer.blocked_autorange``; glibc's malloc keeps its
defaults unless ``--keep-heap`` (``ftmodel.measure.keep_heap``). Frameworks other than eager run
the artifact ftmodel's runner builds (the ONNX Runtime session, the frozen TorchScript module,
the torch.compile'd module), as a user of that framework would build it.

``benchmarks/corpus.py`` runs this script once per model and framework, so that no model's
allocations shape another's heap.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
from pathlib import Path

import torch
import torch.utils.benchmark as tb

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _faults_per_call(fn: object, calls: int) -> float:
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(calls):
        fn()  # type: ignore[operator]
    return (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / calls


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--framework", default="eager")
    ap.add_argument("--batches", default="1,4,16")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--round-s", type=float, default=0.2)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--keep-heap", action="store_true")
    args = ap.parse_args(argv)

    if args.keep_heap:
        from ftmodel.measure import keep_heap
        keep_heap()
    torch.set_num_threads(args.threads)
    from ftmodel.tools.corpus import get_corpus_model
    from ftmodel.frameworks.base import get_framework
    from ftmodel.tracing.inputs import resolve_inputs
    from ftmodel.measure import settle
    from ftmodel.speed import Reference, SpeedMeter

    # only its references are used here
    meter = SpeedMeter(nominal_s=1.0, nominal_host_s=1.0, nominal_memory_s=1.0)

    def reference() -> Reference:  # after the framework's threads have gone quiet
        if fw.settle_s > 0:
            settle(fw.settle_s)
        ref = meter.reference()
        if fw.settle_s > 0:
            settle(0.0)  # the reference's own worker threads, before the runtime's round
        return ref

    zm = get_corpus_model(args.model)
    torch.manual_seed(0)
    model = zm.build().eval()
    fw = get_framework(args.framework)
    out: dict[str, object] = {"model": zm.name, "framework": fw.name,
                              "keep_heap": args.keep_heap, "threads": torch.get_num_threads(),
                              "points": {}}
    for b in sorted(int(x) for x in args.batches.split(",")):
        if fw.runner is None:
            inp = resolve_inputs(model, zm.make_inputs(b), b)

            def fn(inp=inp) -> object:  # type: ignore[no-untyped-def]
                with torch.no_grad():
                    return model(*inp.args, **inp.kwargs)
        else:
            fn = fw.runner(model, zm.make_inputs, b)
        for _ in range(args.warmup):
            fn()
        timer = tb.Timer(stmt="fn()", globals={"fn": fn}, num_threads=args.threads)
        refs = [reference()]
        medians = []
        for _ in range(args.rounds):
            medians.append(timer.blocked_autorange(min_run_time=args.round_s).median)
            refs.append(reference())
        points = out["points"]
        assert isinstance(points, dict)
        points[str(b)] = {"time_s": min(medians), "round_medians_s": medians,
                          "faults_per_call": _faults_per_call(fn, 3),
                          "round_references_s": [r.gemm_s for r in refs],
                          "round_host_references_s": [r.host_s or 0.0 for r in refs],
                          "round_memory_references_s": [r.memory_s or 0.0 for r in refs]}
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
