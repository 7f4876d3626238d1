"""Where glibc's heap starts when a model's timed calls run: the smallest request ``malloc`` maps
on its own, probed at each step of a plain process that measures a corpus model as
``benchmarks/plain_measure.py`` does (after ``import torch``, after building the model, after
each batch's runner is built and after its warm-up calls).

    python benchmarks/mmap_threshold_history.py --framework inductor \\
        --models distilbert-4x384@96,tcn-6x128@1024 \\
        --out benchmarks/results/cpu-epyc/mmap-threshold-history-inductor.md

glibc raises its mmap threshold to the size of each mapped chunk freed (up to 32 MiB), and its
trim threshold to twice that; ftmodel's heap simulation starts from the threshold calibration
measures after ``import torch`` (``HostProfile.mmap_threshold_bytes``). Each model runs in a
fresh process of its own. The probe bisects the smallest request that comes back mapped (bit
1 of the chunk's size field), freeing what the heap served and keeping what was mapped (a free
would move the threshold): it reads the mmap threshold, or the largest free chunk of the heap
where that is larger (a request it holds is not mapped whatever the threshold), so a later
step may read less than an earlier one.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
STEPS = ("import torch", "model built")


def smallest_mapped_request() -> int:
    """The smallest ``malloc`` request glibc maps on its own now (bytes, to 16)."""
    libc = ctypes.CDLL(None)
    libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    served: list[int] = []

    def mapped(n: int) -> bool:
        p = libc.malloc(n)
        if not p:
            raise MemoryError(f"malloc({n}) failed")
        is_mapped = bool(ctypes.c_size_t.from_address(p - 8).value & 2)
        if not is_mapped:
            served.append(p)
        return is_mapped

    lo, hi = 1 << 16, 64 << 20  # lo is served from the heap, hi mapped (above the ceiling)
    if mapped(lo) or not mapped(hi):
        raise RuntimeError("malloc is not glibc's, or its thresholds are set (mallopt)")
    while hi - lo > 16:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if mapped(mid) else (mid, hi)
    for p in served:
        libc.free(p)
    return hi


def _child(name: str, framework: str, batches: list[int], warmup: int) -> dict[str, Any]:
    import torch

    history = {"import torch": smallest_mapped_request()}
    sys.path.insert(0, str(ROOT))
    from ftmodel.frameworks.base import get_framework
    from ftmodel.tools.corpus import get_corpus_model
    from ftmodel.tools.validation import framework_call

    zm = get_corpus_model(name)
    torch.manual_seed(0)
    model = zm.build().eval()
    history["model built"] = smallest_mapped_request()
    fw = get_framework(framework)
    for b in batches:
        fn = framework_call(fw, model, zm.make_inputs, b)
        history[f"b{b} built"] = smallest_mapped_request()
        for _ in range(warmup):
            fn()
        history[f"b{b} warmed up"] = smallest_mapped_request()
    return {"model": name, "history": history}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--framework", default="inductor")
    ap.add_argument("--models", default="", help="comma-separated corpus names")
    ap.add_argument("--batches", default="1,4,16")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", type=Path, default=None, help="also write the table here")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    batches = [int(b) for b in args.batches.split(",")]
    if not args.child and not args.models:
        ap.error("--models: name at least one corpus model")
    if args.child:
        import torch

        torch.set_num_threads(args.threads)
        print(json.dumps(_child(args.child, args.framework, batches, args.warmup)))
        return 0
    steps = [*STEPS, *(f"b{b} {s}" for b in batches for s in ("built", "warmed up"))]
    lines = [f"# Smallest request malloc maps, MB, at each step of a plain process "
             f"({args.framework})", "",
             "- command: `python benchmarks/mmap_threshold_history.py "
             + " ".join(a for a in (argv if argv is not None else sys.argv[1:])) + "`", "",
             "| model | " + " | ".join(steps) + " |", "|---" * (len(steps) + 1) + "|"]
    for name in [m for m in args.models.split(",") if m]:
        cmd = [sys.executable, __file__, "--child", name, "--framework", args.framework,
               "--batches", args.batches, "--warmup", str(args.warmup),
               "--threads", str(args.threads)]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            err = [ln for ln in proc.stderr.splitlines() if ln.strip()]
            lines.append(f"| {name} | failed: {err[-1][:200] if err else proc.returncode} |")
        else:
            hist = json.loads(proc.stdout.strip().splitlines()[-1])["history"]
            lines.append(f"| {name} | " + " | ".join(f"{hist[s] / 1e6:.2f}" for s in steps)
                         + " |")
        print(lines[-1], flush=True)
    if args.out is not None:
        args.out.write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
