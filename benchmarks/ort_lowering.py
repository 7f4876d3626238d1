"""How long ONNX Runtime's lowering takes for a GPU profile, cold and cached.

    python benchmarks/ort_lowering.py --out benchmarks/results/<machine>/ort-lowering.md

A T5-small encoder (d_model 512, 6 layers, 8 heads, d_ff 2048; random weights) at sequence
length 128, predicted for ``onnxruntime`` on the built-in A100 profile at batch 1 in a fresh
process: the first prediction (cold: trace, export, ORT's graph optimisation for the CUDA
execution provider — emulated on the CPU where the provider is not usable — and the graph walk),
the same prediction again (cached: the lowered artifact is kept per model, batch, dtype and
provider), another batch size (a new export), and a second model instance of the same structure
(its Program is the first instance's: lowering is cached per architecture too,
``ftmodel.frameworks.artifact_cache.structure_key``).
Wall-clock seconds of ``predict_latency``, one run each.
"""

from __future__ import annotations

import argparse
import datetime
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import ftmodel  # noqa: E402
from ftmodel.measure import cpu_name  # noqa: E402


def _t5() -> torch.nn.Module:
    import transformers
    torch.manual_seed(0)
    cfg = transformers.T5Config(d_model=512, d_ff=2048, d_kv=64, num_layers=6, num_heads=8,
                                vocab_size=32128)
    return transformers.T5EncoderModel(cfg).eval()


def _timed(model: torch.nn.Module, batch: int) -> float:
    t0 = time.perf_counter()
    ftmodel.predict_latency(model, "onnxruntime", "a100", batch,
                            inputs=lambda b: {"input_ids": torch.zeros(b, 128, dtype=torch.long)})
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "local"
                                         / "ort-lowering.md"))
    args = ap.parse_args()
    torch.set_num_threads(2)
    model = _t5()
    rows = [("first prediction (cold)", _timed(model, 1)),
            ("same model and batch again (cached)", _timed(model, 1)),
            ("same model, batch 8 (new export)", _timed(model, 8)),
            ("a second instance, batch 1", _timed(_t5(), 1))]
    text = "\n".join([
        "# ONNX Runtime lowering for a GPU profile: T5-small encoder, sequence 128", "",
        f"- date: {datetime.date.today()}; {cpu_name()}, torch {torch.__version__}, 2 threads",
        f"- command: `python benchmarks/ort_lowering.py --out {args.out}`", "",
        "| step | seconds |", "|---|---|",
        *(f"| {name} | {s:.2f} |" for name, s in rows), ""])
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
