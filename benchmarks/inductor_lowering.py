"""How long inductor's lowering takes on a CPU: its code generated alone, against a real compile.

    python benchmarks/inductor_lowering.py --out benchmarks/results/<machine>/inductor-lowering.md

For each model (corpus tuning-half models and a zoo MLP; random weights), at one batch size,
in a fresh process with an empty inductor cache directory (``TORCHINDUCTOR_CACHE_DIR``, so no
earlier compile of this machine is reused): the wall-clock seconds of
``ftmodel.frameworks.inductor.build`` generating inductor's code without compiling its C++
kernels (what a prediction does), then of the same build compiling them (what running the
model needs; still cold: the first build leaves nothing in the cache), and whether the two
lowered Programs agree (kernel count and each kernel's class, MACs and bytes). One run each;
the two builds run in the same process one after the other, the lowering-only one first, after
a tiny model's compile has paid the process's one-time costs.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

MODELS = ("resnet34@96", "efficientnet_lite0@112", "convnext_tiny@64", "swin_t@112",
          "distilbert-4x384@96", "mlp-4x2048")


def _child(name: str, batch: int) -> None:
    import torch

    import ftmodel
    from ftmodel.frameworks import inductor
    from ftmodel.tools.corpus import get_corpus_model, is_held_out

    torch.set_num_threads(2)
    if is_held_out(name):
        raise SystemExit(f"{name} is in the corpus's held-out half; pick a tuning-half model")
    zm = get_corpus_model(name)
    torch.manual_seed(0)
    model = zm.build().eval()
    trace = ftmodel.trace(model, zm.make_inputs, batch)
    # one-time costs (imports, the C++ toolchain and ISA probes) paid before either build
    tiny = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU()).eval()
    inductor.build(tiny, torch.randn(1, 8), 2)
    out: dict[str, object] = {"model": name, "batch": batch}
    programs = []
    for label, compile_kernels in (("code_only_s", False), ("compiled_s", True)):
        t0 = time.perf_counter()
        art = inductor.build(model, zm.make_inputs, batch, trace, compile_kernels=compile_kernels)
        out[label] = time.perf_counter() - t0
        programs.append([(k.op_class, k.macs, k.bytes_read, k.bytes_written)
                         for k in art.program.kernels])
    out["kernels"] = len(programs[1])
    out["programs_agree"] = programs[0] == programs[1]
    print(json.dumps(out))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "local"
                                         / "inductor-lowering.md"))
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        _child(args.child, args.batch)
        return
    from ftmodel.measure import cpu_name

    rows = []
    for name in args.models.split(","):
        with tempfile.TemporaryDirectory() as cache:
            env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": cache}
            res = subprocess.run([sys.executable, __file__, "--child", name,
                                  "--batch", str(args.batch)],
                                 env=env, capture_output=True, text=True, check=False)
        if res.returncode != 0:
            print(f"{name}: failed: {res.stderr.strip().splitlines()[-1:]}", file=sys.stderr)
            continue
        row = json.loads(res.stdout.strip().splitlines()[-1])
        rows.append(row)
        print(f"{name:<26} code only {row['code_only_s']:6.1f} s, compiled {row['compiled_s']:6.1f} s"
              f", {row['kernels']} kernels, programs agree: {row['programs_agree']}", flush=True)
    lines = ["# inductor lowering on a CPU: code generated alone against a real compile", "",
             f"- date: {datetime.date.today()}; machine: {cpu_name()}; 2 threads; batch "
             f"{args.batch}; one fresh process per model with an empty inductor cache",
             f"- command: `python benchmarks/inductor_lowering.py --out {args.out}`", "",
             "| model | kernels | code only (s) | compiled (s) | ratio | Programs agree |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['model']} | {r['kernels']} | {r['code_only_s']:.1f} | "
                     f"{r['compiled_s']:.1f} | {r['compiled_s'] / r['code_only_s']:.1f}x | "
                     f"{'yes' if r['programs_agree'] else 'no'} |")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text("\n".join(lines) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
