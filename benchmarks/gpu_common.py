"""Shared pieces of the GPU benchmarks: spec sheets, the Framework Tax data, models, programs.

Used by ``build_gpu_profiles.py``, ``fit_gpu_efficiency.py`` and ``paper_gpus.py`` (run them as
scripts from the repository root; this file sits next to them on ``sys.path``).

* ``gpu_specs()`` parses ``benchmarks/data/gpu_specs.csv`` (numbers out of annotated cells).
* ``latency_points()`` reads ``benchmarks/data/framework_tax/latency.csv`` (duplicate measurements of
  one point are reduced to their median).
* ``MODELS`` builds every model of that file that can be built here, from configs only (random
  weights, no downloads). Hugging Face models use eager attention, as transformers 4.22 did.
* ``program_arrays()`` traces a model and keeps its eager kernels as arrays: batch 1 on its own
  (at batch 1 ``matmul`` folds 4-d operands into ``bmm`` without the copies it needs at larger
  batches, so BERT launches 201 kernels at batch 1 and 237 from batch 2 on), and batch 2 and 3
  for every batch ≥ 2, where per-kernel work is affine in batch (checked against real traces in
  ``fit_gpu_efficiency.py --check``).
* ``predict_arrays()`` is the latency model of ``ftmodel`` (launch expansion, roofline with
  per-dtype parameters, host events, async timeline) vectorised over batch sizes, for fitting.
"""

from __future__ import annotations

import csv
import dataclasses
import hashlib
import math
import os
import pickle
import re
import statistics
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "benchmarks" / "data"  # reference data with its sources: DATA / "README.md"
SPECS_CSV = DATA / "gpu_specs.csv"
LATENCY_CSV = DATA / "framework_tax" / "latency.csv"
TRACES_CSV = DATA / "framework_tax" / "kernel_traces_rtx8000.csv"
FIGURES_CSV = DATA / "framework_tax" / "figures_rtx8000.csv"
CACHE_DIR = Path(os.environ.get("FTMODEL_BENCH_CACHE", "/tmp/ftmodel-gpu-programs"))

# GPU label in latency.csv -> built-in profile name
DATA_GPUS = {"RTX-8000": "rtx8000", "TitanX": "titanx", "1080Ti": "gtx1080ti"}


# ---- spec sheets ------------------------------------------------------------------------------

def _num(cell: str) -> float | None:
    """The first number of an annotated cell ('71 (FP32 acc)', '~1830 (implied)'); None for n/a."""
    cell = (cell or "").strip()
    if not cell or cell.lower().startswith("n/a"):
        return None
    m = re.search(r"\d+(?:\.\d+)?", cell)
    return float(m.group()) if m else None


@dataclass(frozen=True)
class GpuSpec:
    gpu: str
    variant: str
    torch_names: tuple[str, ...]
    arch: str
    compute_capability: float
    sm_count: int
    fp32_tflops: float
    fp16_tensor_tflops: float | None  # dense, fp32 accumulate (what PyTorch uses)
    bf16_tensor_tflops: float | None
    tf32_tensor_tflops: float | None
    memory_gb: float
    mem_bw_gbps: float
    l2_mb: float | None
    notes: str
    source: str
    raw: dict[str, str] = field(default_factory=dict, compare=False)

    @property
    def family(self) -> str:
        return self.arch.split()[0]  # Pascal, Volta, Turing, Ampere, Ada, Hopper


def _torch_names(cell: str) -> tuple[str, ...]:
    """'NVIDIA GeForce GTX 1080 Ti (older drivers: 'GeForce GTX 1080 Ti')' -> both names."""
    m = re.match(r"^(.*?)\s*\(([^()]*[:;][^()]*)\)\s*$", cell)  # an annotation, not "(Pascal)"
    main = (m.group(1) if m else cell).strip()
    quoted = re.findall(r"'([^']+)'", m.group(2)) if m else []
    return tuple(dict.fromkeys([main, *quoted]))


def gpu_specs(path: Path = SPECS_CSV) -> list[GpuSpec]:
    out = []
    with open(path, newline="", encoding="utf-8") as f:
        for r in csv.DictReader(f):
            out.append(GpuSpec(
                gpu=r["gpu"], variant=r["variant"], torch_names=_torch_names(r["torch_device_name"]),
                arch=r["architecture"], compute_capability=float(r["compute_capability"]),
                sm_count=int(_num(r["sm_count"]) or 0), fp32_tflops=float(_num(r["fp32_tflops"]) or 0),
                fp16_tensor_tflops=_num(r["fp16_tensor_dense_tflops_fp32acc"]),
                bf16_tensor_tflops=_num(r["bf16_tensor_dense_tflops"]),
                tf32_tensor_tflops=_num(r["tf32_tensor_dense_tflops"]),
                memory_gb=float(_num(r["memory_gb"]) or 0), mem_bw_gbps=float(_num(r["mem_bw_gbps"]) or 0),
                l2_mb=_num(r["l2_cache_mb"]), notes=r["notes"], source=r["source"], raw=dict(r)))
    return out


# ---- measurements -----------------------------------------------------------------------------

@dataclass(frozen=True)
class Point:
    gpu: str  # profile name
    framework: str
    precision: str
    model: str
    batch: int
    latency_s: float  # median of the duplicates
    n_runs: int
    macs_thop: float


def latency_points(frameworks: tuple[str, ...] = ("eager",)) -> list[Point]:
    groups: dict[tuple[str, str, str, str, int], list[tuple[float, float]]] = defaultdict(list)
    with open(LATENCY_CSV, newline="", encoding="utf-8") as f:
        for r in csv.DictReader(f):
            if r["framework"] not in frameworks or r["gpu"] not in DATA_GPUS:
                continue
            if r["precision"] not in ("fp32", "fp16"):
                continue
            key = (DATA_GPUS[r["gpu"]], r["framework"], r["precision"], r["model"],
                   int(r["batch_size"]))
            groups[key].append((float(r["latency_s"]), float(r["macs_thop"] or "nan")))
    return [Point(*k, statistics.median(v[0] for v in vals), len(vals), vals[0][1])
            for k, vals in sorted(groups.items())]


def kernel_trace_rows() -> list[dict[str, str]]:
    with open(TRACES_CSV, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


# ---- models -----------------------------------------------------------------------------------

def _images(b: int) -> torch.Tensor:
    return torch.randn(b, 3, 224, 224)  # (B, 3, H, W)


def _tv(name: str, **kw: Any) -> Callable[[], torch.nn.Module]:
    def build() -> torch.nn.Module:
        from torchvision import models
        fn = getattr(models.quantization if name == "q_mobilenet_v2" else models,
                     "mobilenet_v2" if name == "q_mobilenet_v2" else name)
        return fn(weights=None, **kw)
    return build


def _hf(model_cls: str, config_cls: str, **cfg: Any) -> Callable[[], torch.nn.Module]:
    def build() -> torch.nn.Module:
        import transformers
        config = getattr(transformers, config_cls)(**cfg)
        return getattr(transformers, model_cls)._from_config(config, attn_implementation="eager")
    return build


@dataclass(frozen=True)
class ModelEntry:
    build: Callable[[], torch.nn.Module]
    inputs: Any  # None = ftmodel's default (token ids of length 128)
    note: str = ""
    meta: bool = True  # build on the meta device (no weight init); False when tracing needs data


# latency.csv model name -> how to build it (architectures as in the paper repo's config.py)
MODELS: dict[str, ModelEntry] = {
    "resnet18": ModelEntry(_tv("resnet18"), _images),
    "resnet50": ModelEntry(_tv("resnet50"), _images),
    "resnet101": ModelEntry(_tv("resnet101"), _images),
    "resnet152": ModelEntry(_tv("resnet152"), _images),
    "wide_resnet50_2": ModelEntry(_tv("wide_resnet50_2"), _images),
    "resnext50_32x4d": ModelEntry(_tv("resnext50_32x4d"), _images),
    "alexnet": ModelEntry(_tv("alexnet"), _images),
    "vgg16": ModelEntry(_tv("vgg16"), _images),
    "squeezenet": ModelEntry(_tv("squeezenet1_0"), _images),
    "densenet": ModelEntry(_tv("densenet161"), _images),
    "inception": ModelEntry(_tv("inception_v3", aux_logits=True, init_weights=False), _images),
    "googlenet": ModelEntry(_tv("googlenet", aux_logits=True, init_weights=False), _images),
    "shufflenet": ModelEntry(_tv("shufflenet_v2_x1_0"), _images),
    "mobilenet_v2": ModelEntry(_tv("q_mobilenet_v2"), _images),
    "mnasnet": ModelEntry(_tv("mnasnet1_0"), _images),
    "efficientnet": ModelEntry(_tv("efficientnet_v2_m"), _images,
                               "torchvision EfficientNetV2-M standing in for timm efficientnetv2_m "
                               "(5.36 vs THOP 5.44 GMACs)"),
    "bert": ModelEntry(_hf("BertModel", "BertConfig"), None),
    "distilbert": ModelEntry(_hf("DistilBertModel", "DistilBertConfig"), None),
    "albert": ModelEntry(_hf("AlbertModel", "AlbertConfig", embedding_size=128, hidden_size=768,
                             num_attention_heads=12, intermediate_size=3072,
                             hidden_act="gelu_new"), None, "albert-base-v2 config"),
    "mobile_bert": ModelEntry(_hf("MobileBertModel", "MobileBertConfig"), None),
    "squeeze_bert": ModelEntry(_hf("SqueezeBertModel", "SqueezeBertConfig"), None),
    "funnel_transformer": ModelEntry(_hf("FunnelModel", "FunnelConfig"), None,
                                     "funnel-transformer/small config"),
    "longformer": ModelEntry(_hf("LongformerModel", "LongformerConfig"), None,
                             "needs the tracer's real-execution fallback (data-dependent "
                             "padding); predicted up to batch 4 only", meta=False),
}
SKIPPED_MODELS = {
    "vit32": "timm model (timm is not installed; torchvision's ViT takes a different, fused path)",
    "efficientnet_lite": "timm-only model (timm is not installed)",
    "gernet": "timm-only model (timm is not installed)",
}
MAX_BATCH = {"longformer": 4}


def build_model(name: str) -> torch.nn.Module:
    entry = MODELS[name]
    torch.manual_seed(0)
    if entry.meta:
        with torch.device("meta"):
            return entry.build()
    return entry.build()


# ---- programs as arrays -----------------------------------------------------------------------

@dataclass
class ProgramArrays:
    """The eager kernels of one model and dtype, with work affine in batch from ``b_lo``."""

    model: str
    dtype: str  # "fp32" | "fp16"
    op_class: np.ndarray  # (N,) str
    kdtype: np.ndarray  # (N,) short dtype name of each kernel
    work1: np.ndarray  # (N, 3) macs, bytes_read, bytes_written at batch b_lo
    work2: np.ndarray  # (N, 3) at batch b_lo + 1 (equal to work1 when b_lo == 1: exact only there)
    events: dict[str, int]  # non-kernel host events (module_call, view, alloc)
    n_aten_kernels: int
    b_lo: int = 1
    framework: str = "eager"

    def work(self, batches: np.ndarray) -> np.ndarray:
        """(B, N, 3) work at each batch."""
        b = np.asarray(batches, dtype=np.float64)[:, None, None]
        return np.maximum(0.0, self.work1[None] + (self.work2 - self.work1)[None]
                          * (b - self.b_lo))


_SOURCES = {
    "eager": ("tracing/dispatch.py", "tracing/formulas.py", "frameworks/eager.py"),
    "torchscript": ("tracing/dispatch.py", "tracing/formulas.py", "frameworks/torchscript.py",
                    "frameworks/torchscript_cuda.py"),
    "onnxruntime": ("frameworks/onnxruntime.py", "frameworks/onnx_graph.py",
                    "frameworks/onnx_cuda.py"),
}
_SOURCES["torchscript-nnc"] = _SOURCES["torchscript"]
# latency.csv framework label -> ftmodel framework
DATA_FRAMEWORKS = {"eager": "eager", "torchscript": "torchscript",
                   "onnxruntime-cuda": "onnxruntime"}


def _cache_key(name: str, dtype: str, b_lo: int, framework: str = "eager") -> Path:
    pkg = ROOT / "ftmodel"
    src = b"".join((pkg / f).read_bytes() for f in _SOURCES[framework])
    tag = hashlib.sha1(src + torch.__version__.encode()).hexdigest()[:10]
    return CACHE_DIR / f"{name}-{framework}-{dtype}-b{b_lo}-{tag}.v2.pkl"


_REAL_MODELS: dict[str, torch.nn.Module] = {}


def framework_program(name: str, framework: str, dtype: str, batch: int) -> Any:
    """The Program ``framework`` runs for model ``name`` on a GPU at ``batch`` (no GPU needed:
    eager from the fake-tensor trace; TorchScript from the traced graph; ONNX Runtime from the
    CUDA EP graph reproduced on the CPU EP). Compiled frameworks need real (random) weights."""
    from ftmodel.frameworks.base import get_framework
    from ftmodel.tracing.dispatch import trace

    tdtype = {"fp32": torch.float32, "fp16": torch.float16}[dtype]
    if framework == "eager":
        return get_framework("eager").lower(trace(build_model(name), MODELS[name].inputs,
                                                  batch, dtype=tdtype))
    if name not in _REAL_MODELS:
        _REAL_MODELS.clear()  # one real model at a time (memory)
        torch.manual_seed(0)
        _REAL_MODELS[name] = MODELS[name].build().eval()
    fw = get_framework(framework.split("-nnc")[0])
    assert fw.lower_model is not None
    prog = fw.lower_model(_REAL_MODELS[name], MODELS[name].inputs, batch, None, device="cuda",
                          dtype=dtype)
    if fw.name == "torchscript":  # the GPU fuser's groups (its device_pass picks them by GPU)
        from ftmodel.frameworks.torchscript_cuda import apply_fuser
        prog = apply_fuser(prog, TS_FUSERS[framework])
    return prog


# PyTorch 1.12's TorchScript fuses with nvFuser on Volta and newer, with NNC before Volta
TS_FUSERS = {"torchscript": "nvfuser", "torchscript-nnc": "nnc"}


def program_framework(framework: str, compute_capability: float) -> str:
    """The program variant a GPU runs: TorchScript on a pre-Volta GPU (compute capability < 7)
    fuses with NNC (pointwise ops only), not nvFuser."""
    if framework == "torchscript" and compute_capability < 7.0:
        return "torchscript-nnc"
    return framework


def program_arrays(name: str, dtype: str, b_lo: int = 2, framework: str = "eager"
                   ) -> ProgramArrays:
    """Kernels of ``name`` in ``dtype`` under ``framework`` (on a GPU): exact at batch 1
    (``b_lo=1``), affine from batch 2 and 3 otherwise (cached under /tmp: lowering takes
    seconds a model)."""
    path = _cache_key(name, dtype, b_lo, framework)
    if path.is_file():
        with open(path, "rb") as f:
            return ProgramArrays(**pickle.load(f))  # noqa: S301 - our own cache file
    batches = (1,) if b_lo == 1 else (b_lo, b_lo + 1)
    progs = [framework_program(name, framework, dtype, b) for b in batches]
    progs = progs * (3 - len(progs))
    if [k.op_class for k in progs[0].kernels] != [k.op_class for k in progs[1].kernels]:
        raise RuntimeError(f"{name} ({framework}): kernel sequence changes between batch "
                           f"{batches}")
    arr = ProgramArrays(
        model=name, dtype=dtype,
        op_class=np.array([k.op_class for k in progs[0].kernels]),
        kdtype=np.array([{"float16": "fp16", "bfloat16": "bf16"}.get(k.dtype, "fp32")
                         for k in progs[0].kernels]),
        work1=np.array([[k.macs, k.bytes_read, k.bytes_written] for k in progs[0].kernels],
                       dtype=np.float64).reshape(-1, 3),
        work2=np.array([[k.macs, k.bytes_read, k.bytes_written] for k in progs[1].kernels],
                       dtype=np.float64).reshape(-1, 3),
        events={e: c for e, c in progs[0].host_events.items() if not e.startswith("kernel:")},
        n_aten_kernels=len(progs[0].kernels), b_lo=b_lo, framework=framework,
    )
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        pickle.dump(dataclasses.asdict(arr), f)  # plain types: loadable from any module
    return arr


def expand_arrays(p: ProgramArrays, table: dict[str, float]) -> ProgramArrays:
    """``ftmodel.estimate.launches.expand_launches`` on arrays (same rounding rule)."""
    if not table:
        return p
    idx: list[int] = []
    aux: list[bool] = []
    seen: dict[str, int] = defaultdict(int)
    for i, (cls, dt) in enumerate(zip(p.op_class.tolist(), p.kdtype.tolist())):
        idx.append(i)
        aux.append(False)
        extra = float(table.get(f"{cls}:{dt}", table.get(cls, 1.0))) - 1.0
        if extra <= 0:
            continue
        k = seen[f"{cls}:{dt}"]
        seen[f"{cls}:{dt}"] += 1
        n = math.floor(extra * (k + 1) + 0.5) - math.floor(extra * k + 0.5)
        idx.extend([i] * n)
        aux.extend([True] * n)
    ix = np.array(idx)
    is_aux = np.array(aux)
    cls = p.op_class[ix].copy()
    cls[is_aux] = "aux"
    w1, w2 = p.work1[ix].copy(), p.work2[ix].copy()
    w1[is_aux] = 0.0
    w2[is_aux] = 0.0
    return ProgramArrays(p.model, p.dtype, cls, p.kdtype[ix], w1, w2, p.events, p.n_aten_kernels,
                         p.b_lo, p.framework)


# ---- the latency model, vectorised over batch --------------------------------------------------

MAC_CLASSES = ("gemm", "conv", "conv_grouped", "bmm", "attention")


def _param(params: dict[str, float], name: str, dtype: str, default: float = 0.0) -> float:
    return params.get(f"{name}:{dtype}", params.get(name, default))


_ELEM_BYTES = {"fp16": 2.0, "bf16": 2.0, "fp32": 4.0, "tf32": 4.0, "fp64": 8.0}


def device_times(p: ProgramArrays, batches: np.ndarray, op_params: dict[str, dict[str, float]],
                 kernel_floor_s: float) -> np.ndarray:
    """(B, N) kernel seconds: the roofline of ``ftmodel.estimate.kernels`` with dtype params."""
    w = p.work(batches)
    macs, nbytes = w[..., 0], w[..., 1] + w[..., 2]
    out = np.zeros_like(macs)
    eps = 1.0
    for cls in np.unique(p.op_class):
        prm = op_params.get(str(cls)) or op_params.get(_fallback(str(cls)), {})
        for dt in np.unique(p.kdtype[p.op_class == cls]):
            sel = (p.op_class == cls) & (p.kdtype == dt)
            m, nb = macs[:, sel], nbytes[:, sel]
            g = lambda k, d=0.0: _param(prm, k, str(dt), d)  # noqa: E731
            t = nb / g("bandwidth_Bps") * (1.0 + g("half_bytes") / (nb + eps))
            if g("peak_macs_per_s") > 0:
                q = 1.0
                if g("wave_slots") > 0 and g("tile_outputs") > 0:
                    from ftmodel.estimate.kernels import wave_factor  # the library's formula
                    q = wave_factor(m, w[..., 2][:, sel], _ELEM_BYTES.get(str(dt), 4.0),
                                    g("wave_slots"), g("tile_outputs"))
                t = np.maximum(t, (m * q + g("half_macs") * m / (m + eps))
                               / g("peak_macs_per_s"))
            out[:, sel] = np.maximum(t, g("floor_s"))
    return np.maximum(out, kernel_floor_s)


def _fallback(cls: str) -> str:
    from ftmodel.estimate.kernels import FALLBACK_CLASS
    return FALLBACK_CLASS.get(cls, "elementwise")


def host_times(p: ProgramArrays, per_event_s: dict[str, float]) -> np.ndarray:
    """(N,) host seconds per kernel, as ``ftmodel.estimate.timeline.host_costs_s``."""
    default = per_event_s.get("kernel:elementwise", 0.0)
    own = np.array([per_event_s.get(f"kernel:{c}", default) for c in p.op_class.tolist()])
    shared = sum(c * per_event_s.get(e, 0.0) for e, c in p.events.items())
    return own + shared / max(1, len(own))


def timeline(host_s: np.ndarray, device_s: np.ndarray, per_call_s: float,
             launch_latency_s: float, sync_s: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Latency, overhead and compute (each (B,)) of the async recurrence
    ``t_host += o_i; t_dev = max(t_dev, t_host + L) + k_i``, unrolled:
    ``t_dev_N = K_N + max_j (H_j + L − K_{j−1})``."""
    h = per_call_s + np.cumsum(host_s)  # (N,)
    k_cum = np.cumsum(device_s, axis=1)  # (B, N)
    k_prev = np.concatenate([np.zeros((device_s.shape[0], 1)), k_cum[:, :-1]], axis=1)
    t_dev = k_cum[:, -1] + np.max(h[None, :] + launch_latency_s - k_prev, axis=1)
    latency = np.maximum(t_dev, h[-1]) + sync_s
    return latency, np.full(latency.shape, h[-1]), k_cum[:, -1]


def needed_programs(points: list[Point]) -> list[tuple[str, str, str, int]]:
    """(model, framework, dtype, b_lo) of every program the points need."""
    out = set()
    for p in points:
        if p.model in MODELS and p.batch <= MAX_BATCH.get(p.model, 10**9):
            fw = program_framework(DATA_FRAMEWORKS[p.framework], 6.1 if p.gpu != "rtx8000" else 7.5)
            out.add((p.model, fw, p.precision, 1 if p.batch == 1 else 2))
    return sorted(out)


def main(argv: list[str] | None = None) -> int:
    """Lower (and cache) the programs of the paper's points: ``gpu_common.py [--budget S]``."""
    import argparse
    import time

    ap = argparse.ArgumentParser(description=main.__doc__)
    ap.add_argument("--budget", type=float, default=480.0, help="stop after this many seconds")
    ap.add_argument("--frameworks", default=",".join(DATA_FRAMEWORKS))
    args = ap.parse_args(argv)
    t0 = time.time()
    todo = needed_programs(latency_points(tuple(args.frameworks.split(","))))
    done = 0
    for model, fw, dt, b_lo in todo:
        if _cache_key(model, dt, b_lo, fw).is_file():
            done += 1
            continue
        if time.time() - t0 > args.budget:
            break
        t1 = time.time()
        try:
            program_arrays(model, dt, b_lo, fw)
            done += 1
            print(f"{model} {fw} {dt} b{b_lo}: {time.time() - t1:.1f}s", flush=True)
        except Exception as err:  # noqa: BLE001 - report and go on (e.g. FrameworkUnsupported)
            print(f"{model} {fw} {dt} b{b_lo}: FAILED {type(err).__name__}: "
                  f"{str(err).splitlines()[0][:200]}", flush=True)
    print(f"{done}/{len(todo)} programs cached in {CACHE_DIR}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
