"""Fit the built-in GPU profiles' efficiency and host parameters on the Framework Tax data.

    .venv/bin/python benchmarks/fit_gpu_efficiency.py            # writes benchmarks/gpu_efficiency.json
    .venv/bin/python benchmarks/fit_gpu_efficiency.py --check    # also checks affine-in-batch work

Data: ``shared/data/framework_tax/latency.csv`` (PyTorch eager, fp32 and fp16, on the Quadro
RTX 8000, Titan X (Pascal) and GTX 1080 Ti) and ``kernel_traces_rtx8000.csv`` /
``figures_rtx8000.csv`` (summed kernel time of ResNet-50 and BERT-Base on the RTX 8000).

Every model of latency.csv that can be built from a config (``gpu_common.MODELS``) is traced with
``ftmodel.trace`` at batch 1 and 2 and lowered with the eager framework; any batch follows because
per-kernel work is affine in batch. Then:

1. **Launch expansion** (fitted only on the torch.profiler traces): ResNet-50 eager launches ~249
   kernels in fp32 and ~372 in fp16 for 174 aten kernels. ``addmm`` is taken as 2 kernels (PyTorch
   1.12 copies the bias into the output before the cuBLAS GEMM); every other non-conv op as 1; the
   rest is divided over the 53 convolutions: kernels per conv = (launches − non-conv kernels) / 53,
   the median over the traced batch sizes, per dtype. (ResNet-18's trace, 96 launches for 68 aten
   ops, gives 2.35 per conv with the same rule: a cross-check, not fitted.)
2. **Least squares on log latency** over every (GPU, precision, model, batch) point of the training
   GPUs, plus the summed kernel time of the traces (log, weight 2), of a small parameter vector:
   device (shared by all GPUs, multiplied into each GPU's spec sheet): ``eff_cuda``,
   ``eff_tensor``, ``eff_bw``, ``eff_grouped``, ``ramp_mac_s``, ``ramp_byte_s``,
   ``kernel_floor_s``; host (eager, per event): ``conv``, ``gemm`` (gemm/bmm/attention),
   ``other`` kernels, ``aux`` helper launches, ``module_call``, ``view`` (views and allocations),
   ``per_call``, and one speed factor per host CPU other than the RTX 8000's Xeon E5-2630.
   ``launch_latency_s`` (4 µs) and ``sync_s`` (10 µs) are fixed, typical of PCIe GPUs. A weak
   prior (weight 0.05 per log-parameter, towards ``START``) keeps parameters that the training
   GPUs cannot identify at a typical value: without a tensor-core GPU (leave the RTX 8000 out)
   ``eff_tensor`` would otherwise drift to its bound; its prior, 0.5, is a typical fraction of
   dense tensor-core peak reached by cuBLAS/cuDNN.
3. **Default host** ``paper-host``: the geometric mean of the fitted hosts' speed factors; used
   for every GPU whose paper host was not measured, and for a GPU left out of the fit.

The model evaluated here is ``ftmodel``'s own (``gpu_common.predict_arrays`` is checked against
``ftmodel.predict_latency`` in ``paper_gpus.py``).
"""

from __future__ import annotations

import argparse
import json
import math
import re
import statistics
import sys
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from scipy.optimize import least_squares

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from build_gpu_profiles import NAMES, device_half  # noqa: E402
from gpu_common import (  # noqa: E402
    DATA_GPUS,
    FIGURES_CSV,
    MAX_BATCH,
    MODELS,
    GpuSpec,
    Point,
    ProgramArrays,
    device_times,
    expand_arrays,
    gpu_specs,
    host_times,
    kernel_trace_rows,
    latency_points,
    program_arrays,
    timeline,
)

OUT = Path(__file__).resolve().parent / "gpu_efficiency.json"
FIXED = {"launch_latency_s": 4e-6, "sync_s": 1e-5}
DEVICE_KEYS = ("eff_cuda", "eff_tensor", "eff_bw", "eff_grouped", "ramp_mac_s", "ramp_byte_s",
               "kernel_floor_s")
HOST_KEYS = ("conv", "gemm", "other", "aux", "module_call", "view", "per_call")
# the paper's host CPU of each measured GPU (Table A1; the Titan X host is not named)
HOST_OF = {"rtx8000": "paper-host-e5-2630", "titanx": "paper-host-titanx",
           "gtx1080ti": "paper-host-silver-4110"}
HOST_CPU = {"paper-host-e5-2630": "Intel Xeon E5-2630 (host of the paper's RTX 8000 and 2080 Ti)",
            "paper-host-titanx": "the Titan X (Pascal) host of the paper (CPU not named)",
            "paper-host-silver-4110": "Intel Xeon Silver 4110 (host of the paper's 1080 Ti and "
                                      "A6000)"}
REF_HOST = "paper-host-e5-2630"
PRIOR_WEIGHT = 0.05  # weak pull of log-parameters towards START: pins what data cannot identify
START = {"eff_cuda": 0.7, "eff_tensor": 0.5, "eff_bw": 0.7, "eff_grouped": 0.3,
         "ramp_mac_s": 5e-6, "ramp_byte_s": 2e-6, "kernel_floor_s": 2.5e-6,
         "conv": 3e-5, "gemm": 2e-5, "other": 1.5e-5, "aux": 4e-6, "module_call": 5e-6,
         "view": 3e-6, "per_call": 5e-5}
BOUNDS = {"eff_cuda": (0.05, 1.0), "eff_tensor": (0.02, 1.0), "eff_bw": (0.1, 1.0),
          "eff_grouped": (0.005, 1.0), "ramp_mac_s": (1e-7, 1e-4), "ramp_byte_s": (1e-7, 1e-4),
          "kernel_floor_s": (5e-7, 2e-5), "conv": (1e-7, 2e-4), "gemm": (1e-7, 2e-4),
          "other": (1e-7, 2e-4), "aux": (1e-8, 5e-5), "module_call": (1e-8, 5e-5),
          "view": (1e-8, 5e-5), "per_call": (1e-7, 2e-3)}


# ---- launch expansion -------------------------------------------------------------------------

def fit_launch_expansion(resnet50: ProgramArrays) -> tuple[dict[str, float], dict[str, Any]]:
    n_conv = int(np.sum(resnet50.op_class == "conv"))
    n_addmm = int(np.sum(resnet50.op_class == "gemm"))
    non_conv = resnet50.n_aten_kernels - n_conv + n_addmm  # addmm = bias copy + GEMM
    counts: dict[str, dict[int, list[int]]] = {"fp32": defaultdict(list), "fp16": defaultdict(list)}
    for r in kernel_trace_rows():
        fw, prec, d = r["framework"], r["precision"], r["dir"].split("/")[-1]
        if r["model"] != "resnet50" or "eager" not in fw or "jit" in d or "-ts" in d:
            continue
        dtype = "fp16" if prec.startswith("fp16") or "float16" in d else "fp32"
        m = re.search(r"(?:batch|bs)(\d+)", d)
        if m is None:
            continue
        batch = int(m.group(1))
        counts[dtype][batch].append(int(r["launch_calls"]))
    per_batch = {dt: {b: statistics.median(v) for b, v in sorted(c.items())}
                 for dt, c in counts.items()}
    table = {"gemm": 2.0}
    for dt, pb in per_batch.items():
        launches = statistics.median(pb.values())
        table["conv" if dt == "fp32" else "conv:fp16"] = round((launches - non_conv) / n_conv, 3)
    info = {"resnet50_aten_kernels": resnet50.n_aten_kernels, "convs": n_conv,
            "non_conv_kernels": non_conv, "launch_calls_by_batch": per_batch}
    return table, info


# ---- data and programs ------------------------------------------------------------------------

@dataclass
class Group:
    gpu: str
    dtype: str
    model: str
    batches: np.ndarray
    measured_s: np.ndarray
    prog: ProgramArrays


def build_groups(points: list[Point], table: dict[str, float],
                 specs: dict[str, GpuSpec]) -> list[Group]:
    by: dict[tuple[str, str, str], list[Point]] = defaultdict(list)
    for p in points:
        if p.model in MODELS and p.batch <= MAX_BATCH.get(p.model, 10**9):
            by[(p.gpu, p.precision, p.model)].append(p)
    out = []
    cache: dict[tuple[str, str, bool, int], ProgramArrays] = {}
    for (gpu, dt, model), all_pts in sorted(by.items()):
        tensor = specs[gpu].fp16_tensor_tflops is not None
        for b_lo in (1, 2):
            pts = [p for p in all_pts if (p.batch == 1) == (b_lo == 1)]
            if not pts:
                continue
            key = (model, dt, tensor, b_lo)
            if key not in cache:
                t = dict(table)
                if not tensor:
                    t.pop("conv:fp16", None)
                cache[key] = expand_arrays(program_arrays(model, dt, b_lo), t)
            out.append(Group(gpu, dt, model, np.array([p.batch for p in pts]),
                             np.array([p.latency_s for p in pts]), cache[key]))
    return out


def kernel_sum_targets() -> list[tuple[str, str, int, float]]:
    """(model, dtype, batch, summed kernel seconds) on the RTX 8000."""
    acc: dict[tuple[str, str, int], list[float]] = defaultdict(list)
    for r in kernel_trace_rows():
        d = r["dir"].split("/")[-1]
        if r["model"] != "resnet50" or "PyTorch eager" != r["framework"] or \
                r["kernels"] != r["launch_calls"] or not d.startswith(("resnet50-batch",
                                                                        "pytorch-batch")):
            continue
        dtype = "fp16" if r["precision"].startswith("fp16") else "fp32"
        b = int(d.split("batch")[1].split("-")[0])
        acc[("resnet50", dtype, b)].append(float(r["kern_sum_us"]) * 1e-6)
    with open(FIGURES_CSV, encoding="utf-8") as f:
        import csv
        for r in csv.DictReader(f):
            if r["figure"] == "figs/framework-overhead.pdf" and \
                    r["series"] == "CUDA Kernel Execution Time":
                acc[("bert", "fp16", int(float(r["x"])))].append(float(r["latency_ms"]) * 1e-3)
    return [(m, dt, b, statistics.median(v)) for (m, dt, b), v in sorted(acc.items())]


# ---- parameters -> profiles -------------------------------------------------------------------

def unpack(x: np.ndarray, host_names: list[str]) -> dict[str, float]:
    keys = list(DEVICE_KEYS) + list(HOST_KEYS) + [f"scale:{h}" for h in host_names]
    return {k: float(math.exp(v)) for k, v in zip(keys, x)}


def eff_of(th: dict[str, float]) -> dict[str, float]:
    return {**{k: th[k] for k in DEVICE_KEYS}, **FIXED}


def host_events(th: dict[str, float], scale: float) -> tuple[dict[str, float], float]:
    per = {f"kernel:{c}": th["conv"] for c in ("conv", "conv_grouped")}
    per.update({f"kernel:{c}": th["gemm"] for c in ("gemm", "bmm", "attention")})
    per.update({f"kernel:{c}": th["other"] for c in (
        "elementwise", "norm", "softmax", "reduction", "pool", "embedding", "copy", "other")})
    per["kernel:aux"] = th["aux"]
    per["module_call"] = th["module_call"]
    per["view"] = per["alloc"] = th["view"]
    return {k: v * scale for k, v in per.items()}, th["per_call"] * scale


def op_params(spec: GpuSpec, eff: dict[str, float]) -> tuple[dict[str, dict[str, float]], float]:
    dev = device_half(spec, "x", eff, {})
    return {c: dict(d.params) for c, d in dev.op_classes.items()}, dev.kernel_floor_s


def predict_group(g: Group, spec: GpuSpec, th: dict[str, float], scale: float
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    eff = eff_of(th)
    ops, floor = op_params(spec, eff)
    per, per_call = host_events(th, scale)
    dev = device_times(g.prog, g.batches, ops, floor)
    return timeline(host_times(g.prog, per), dev, per_call, eff["launch_latency_s"], eff["sync_s"])


# ---- the fit ----------------------------------------------------------------------------------

@dataclass
class FitResult:
    theta: dict[str, float]
    host_scales: dict[str, float]  # host name -> speed factor (REF_HOST = 1)
    train_gpus: list[str]
    n_points: int
    rmse_log: float
    seconds: float


def fit(groups: list[Group], train_gpus: list[str], specs: dict[str, GpuSpec],
        ksum: list[tuple[str, str, int, float]], ksum_groups: dict[tuple[str, str, int], Group]
        ) -> FitResult:
    train = [g for g in groups if g.gpu in train_gpus]
    hosts = sorted({HOST_OF[g] for g in train_gpus} - {REF_HOST})
    ref = REF_HOST if "rtx8000" in train_gpus else HOST_OF[sorted(train_gpus)[0]]
    hosts = sorted({HOST_OF[g] for g in train_gpus} - {ref})
    x0 = np.log([START[k] for k in DEVICE_KEYS + HOST_KEYS] + [1.0] * len(hosts))
    lo = np.log([BOUNDS[k][0] for k in DEVICE_KEYS + HOST_KEYS] + [0.3] * len(hosts))
    hi = np.log([BOUNDS[k][1] for k in DEVICE_KEYS + HOST_KEYS] + [3.0] * len(hosts))
    use_ksum = "rtx8000" in train_gpus

    def residuals(x: np.ndarray) -> np.ndarray:
        th = unpack(x, hosts)
        out = []
        for g in train:
            h = HOST_OF[g.gpu]
            scale = 1.0 if h == ref else th[f"scale:{h}"]
            lat, _, _ = predict_group(g, specs[g.gpu], th, scale)
            out.append(np.log(lat / g.measured_s))
        if use_ksum:
            for (model, dt, b, ks) in ksum:
                g = ksum_groups[(model, dt, 1 if b == 1 else 2)]
                gg = Group(g.gpu, dt, model, np.array([b]), np.array([ks]), g.prog)
                _, _, comp = predict_group(gg, specs["rtx8000"], th, 1.0)
                out.append(2.0 * np.log(comp / ks))
        out.append(PRIOR_WEIGHT * (x - x0))
        return np.concatenate(out)

    t0 = time.time()
    res = least_squares(residuals, x0, bounds=(lo, hi), x_scale=1.0, diff_step=1e-3,
                        max_nfev=400)
    th = unpack(res.x, hosts)
    scales = {ref: 1.0, **{h: th.pop(f"scale:{h}") for h in hosts}}
    n = sum(len(g.batches) for g in train)
    return FitResult(th, scales, sorted(train_gpus), n,
                     float(np.sqrt(np.mean(res.fun ** 2))), time.time() - t0)


def params_json(fr: FitResult, table: dict[str, float], expansion_info: dict[str, Any]
                ) -> dict[str, Any]:
    th = fr.theta
    paper_scale = math.exp(statistics.fmean(math.log(s) for s in fr.host_scales.values()))
    hosts: dict[str, Any] = {}
    for name, scale in [("paper-host", paper_scale), *sorted(fr.host_scales.items())]:
        per, per_call = host_events(th, scale)
        note = (f"geometric mean of the fitted paper hosts ({', '.join(sorted(fr.host_scales))}):"
                " a Xeon-class server CPU with PyTorch 1.12 eager" if name == "paper-host"
                else f"fitted on the paper's measurements with {HOST_CPU[name]}")
        hosts[name] = {"cpu": "Xeon-class server CPU (Framework Tax paper hosts)"
                       if name == "paper-host" else HOST_CPU[name],
                       "note": note, "speed_factor": scale,
                       "aliases": ["default-host"] if name == "paper-host" else [],
                       "frameworks": {"eager": {"per_event_s": per, "per_call_s": per_call}}}
    gpu_hosts = {g: HOST_OF[g] for g in fr.train_gpus}
    if "paper-host-e5-2630" in hosts:
        gpu_hosts["rtx2080ti"] = "paper-host-e5-2630"  # same machine family in Table A1
    if "paper-host-silver-4110" in hosts:
        gpu_hosts["a6000"] = "paper-host-silver-4110"
    return {
        "description": "Efficiency and host parameters of the built-in GPU profiles, fitted by "
                       "benchmarks/fit_gpu_efficiency.py; read by build_gpu_profiles.py.",
        "fitted_on_gpus": fr.train_gpus,
        "fit": {"points": fr.n_points, "rmse_log_latency": fr.rmse_log,
                "seconds": round(fr.seconds, 1)},
        "device": {**{k: th[k] for k in DEVICE_KEYS}, **FIXED},
        "launches_per_op": {"eager": table},
        "launch_expansion_fit": expansion_info,
        "host_events_eager_ref_s": {k: th[k] for k in HOST_KEYS},
        "hosts": hosts,
        "gpu_hosts": gpu_hosts,
    }


def spec_by_profile() -> dict[str, GpuSpec]:
    return {NAMES[(s.gpu, s.variant)][0]: s for s in gpu_specs()}


def prepare() -> tuple[list[Group], dict[str, float], dict[str, Any], dict[str, GpuSpec],
                       list[tuple[str, str, int, float]], dict[tuple[str, str, int], Group]]:
    specs = spec_by_profile()
    table, info = fit_launch_expansion(program_arrays("resnet50", "fp32", 1))
    points = latency_points(("eager",))
    groups = build_groups(points, table, specs)
    ksum = kernel_sum_targets()
    kg = {(g.model, g.dtype, g.prog.b_lo): g for g in groups if g.gpu == "rtx8000"}
    return groups, table, info, specs, ksum, kg


def check_affine(models: tuple[str, ...] = ("resnet50", "bert", "funnel_transformer")) -> None:
    """Per-kernel work from batch 1 and 2 equals a real trace at batch 8 and 64."""
    import torch

    from ftmodel.frameworks import eager
    from ftmodel.tracing.dispatch import trace
    from gpu_common import build_model
    for name in models:
        arr = program_arrays(name, "fp32", 2)
        model = build_model(name)
        for b in (8, 64):
            prog = eager.lower(trace(model, MODELS[name].inputs, b, dtype=torch.float32))
            real = np.array([[k.macs, k.bytes_read, k.bytes_written] for k in prog.kernels])
            err = np.abs(arr.work(np.array([b]))[0] - real).max()
            print(f"affine check {name} batch {b}: max abs work error {err:.0f}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--check", action="store_true", help="verify affine-in-batch work first")
    ap.add_argument("--gpus", default=",".join(DATA_GPUS.values()))
    args = ap.parse_args(argv)
    if args.check:
        check_affine()
    groups, table, info, specs, ksum, kg = prepare()
    print(f"launch expansion: {table}")
    fr = fit(groups, args.gpus.split(","), specs, ksum, kg)
    out = params_json(fr, table, info)
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps({"device": out["device"], "host": out["host_events_eager_ref_s"],
                      "scales": fr.host_scales, "fit": out["fit"]}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
