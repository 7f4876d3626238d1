"""Helper-kernel expansion per framework, fitted on the paper's torch.profiler kernel counts.

``kernel_traces_rtx8000.csv`` holds one-forward-pass traces of ResNet-50 on the RTX 8000 under
PyTorch eager, TorchScript and ONNX Runtime (CUDA EP). The Programs ftmodel lowers count one
kernel per framework op; cuDNN and cuBLAS launch more (see ``ftmodel.estimate.launches``). Per
framework and dtype:

* every non-conv op launches 1 kernel, except eager/TorchScript ``addmm`` (PyTorch 1.12 copies
  the bias into the output before the cuBLAS GEMM: 2 kernels, op class ``gemm``);
* the rest is spread over the convolutions: kernels per conv = (launches − non-conv kernels) /
  convs, with ``launches`` the median over batch sizes of the per-batch median count.

TorchScript runs the same ATen/cuDNN calls as eager (its traces count the same kernels:
248–249 fp32, 372–391 fp16), so it uses eager's table. ONNX Runtime's traces are not labelled
by precision row by row (two files per run, "fp32 (1st file per run) / fp16 (2nd file)"); the
fp32 graph has 56 kernel nodes and the fp16 graph 121, so a trace with fewer than 180 kernels is
fp32. cuDNN's algorithm choice (``cudnn_conv_algo_search=EXHAUSTIVE``) changes the helper count
with batch size (fp32: 73 kernels at batch 1, 129–130 at 16, 114–115 at 32 and 64); one
batch-independent expectation keeps the crossover search well defined, and the per-batch
residuals are reported by ``paper_gpus.py``.
"""

from __future__ import annotations

import re
import statistics
from collections import defaultdict
from typing import Any

import numpy as np
from gpu_common import ProgramArrays, kernel_trace_rows

__all__ = ["trace_launch_counts", "fit_tables"]

FP16_MIN_ORT_KERNELS = 180  # ResNet-50 ORT: fp32 graph 56 nodes (73-130 kernels), fp16 121 (235+)


def _batch(d: str) -> int | None:
    m = re.search(r"(?:batch|bs)(\d+)", d)
    return int(m.group(1)) if m else None


def trace_launch_counts() -> dict[str, dict[str, dict[int, float]]]:
    """ResNet-50 kernel launches in the traces: framework -> dtype -> batch -> median."""
    acc: dict[str, dict[str, dict[int, list[int]]]] = {
        fw: {"fp32": defaultdict(list), "fp16": defaultdict(list)} for fw in ("eager", "onnxruntime")}
    for r in kernel_trace_rows():
        fw, prec, d = r["framework"], r["precision"], r["dir"].split("/")[-1]
        if r["model"] != "resnet50":
            continue
        b = _batch(d)
        if b is None:
            continue
        if fw == "PyTorch eager" and "jit" not in d and "-ts" not in d:
            dtype = "fp16" if prec.startswith("fp16") or "float16" in d else "fp32"
            acc["eager"][dtype][b].append(int(r["launch_calls"]))
        elif fw == "ONNXRuntime-CUDA":
            n = int(r["kernels"])
            acc["onnxruntime"]["fp16" if n >= FP16_MIN_ORT_KERNELS else "fp32"][b].append(n)
    return {fw: {dt: {b: float(statistics.median(v)) for b, v in sorted(c.items())}
                 for dt, c in per.items()} for fw, per in acc.items()}


def _table(prog32: ProgramArrays, prog16: ProgramArrays, counts: dict[str, dict[int, float]],
           gemm_kernels: float) -> tuple[dict[str, float], dict[str, Any]]:
    table: dict[str, float] = {"gemm": gemm_kernels} if gemm_kernels != 1.0 else {}
    info: dict[str, Any] = {"launch_calls_by_batch": counts}
    for dt, prog in (("fp32", prog32), ("fp16", prog16)):
        if not counts.get(dt):
            continue
        n_conv = int(np.sum(prog.op_class == "conv"))
        n_gemm = int(np.sum(prog.op_class == "gemm"))
        non_conv = prog.n_aten_kernels - n_conv + n_gemm * (gemm_kernels - 1.0)
        launches = statistics.median(counts[dt].values())
        table["conv" if dt == "fp32" else "conv:fp16"] = round((launches - non_conv) / n_conv, 3)
        info[dt] = {"program_kernels": prog.n_aten_kernels, "convs": n_conv,
                    "non_conv_kernels": non_conv, "median_launches": launches}
    return table, info


def fit_tables(programs: dict[tuple[str, str], ProgramArrays]
               ) -> tuple[dict[str, dict[str, float]], dict[str, Any]]:
    """``launches_per_op`` per framework from ResNet-50's programs ((framework, dtype) -> arrays
    at batch 1) and the traces; and what the fit used."""
    counts = trace_launch_counts()
    eager, e_info = _table(programs[("eager", "fp32")], programs[("eager", "fp16")],
                           counts["eager"], 2.0)
    ort, o_info = _table(programs[("onnxruntime", "fp32")], programs[("onnxruntime", "fp16")],
                         counts["onnxruntime"], 1.0)
    tables = {"eager": eager, "torchscript": dict(eager), "onnxruntime": ort}
    return tables, {"eager": e_info, "onnxruntime": o_info,
                    "torchscript": "eager's table (same ATen/cuDNN calls; same trace counts)"}
