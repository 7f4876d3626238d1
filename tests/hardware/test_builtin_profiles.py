"""Built-in GPU profiles (benchmarks/build_gpu_profiles.py): names, dtypes, errors, predictions.

The prediction tests are genuine predictions of the paper's findings with the built-in
profiles (nothing here special-cases a model): framework-bound plateaus up to the crossover,
a faster GPU that is not faster at batch 1, width that costs nothing while framework-bound, and
Funnel Transformer slower than BERT despite fewer MACs. Models are built on the meta device
(random-weight configs, no downloads) and traced on fake tensors.
"""

from __future__ import annotations

import csv
import statistics
from pathlib import Path

import pytest
import torch
from torch import nn

import ftmodel
from ftmodel.errors import InvalidArgumentError, ProfileError, UnknownNameError
from ftmodel.estimate.launches import expand_launches
from ftmodel.frameworks import eager
from ftmodel.hardware.profile import HostProfile
from ftmodel.hardware.registry import list_profiles, load_host_profile, load_profile

SPECS_CSV = Path(__file__).resolve().parents[2] / "benchmarks" / "data" / "gpu_specs.csv"
TRACES_CSV = SPECS_CSV.parent / "framework_tax" / "kernel_traces_rtx8000.csv"

transformers = pytest.importorskip("transformers")
torchvision = pytest.importorskip("torchvision")


def _meta(build):  # type: ignore[no-untyped-def]
    with torch.device("meta"):
        return build()


def _hf(model_cls: str, config: object) -> nn.Module:
    cls = getattr(transformers, model_cls)
    return _meta(lambda: cls._from_config(config, attn_implementation="eager"))


def _images(b: int) -> torch.Tensor:
    return torch.randn(b, 3, 224, 224)  # (B, 3, H, W)


@pytest.fixture(scope="module")
def bert() -> nn.Module:
    return _hf("BertModel", transformers.BertConfig())


@pytest.fixture(scope="module")
def resnet50() -> nn.Module:
    return _meta(lambda: torchvision.models.resnet50(weights=None))


# ---- names ------------------------------------------------------------------------------------

def _csv_rows() -> list[dict[str, str]]:
    if not SPECS_CSV.is_file():
        pytest.skip(f"{SPECS_CSV} not found")
    with open(SPECS_CSV, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def test_every_csv_gpu_has_a_profile() -> None:
    builtin = {(e.name, e.kind) for e in list_profiles() if e.source == "builtin"}
    variants = {(load_profile(n).device.specs["gpu"], load_profile(n).device.specs["variant"])
                for n, kind in builtin if kind == "spec-derived" and not n.startswith("paper")}
    for row in _csv_rows():
        assert (row["gpu"], row["variant"]) in variants, row["gpu"] + " " + row["variant"]


def test_profiles_are_spec_derived_async_cuda() -> None:
    prof = load_profile("a100")
    assert prof.kind == "spec-derived"
    assert (prof.device.type, prof.device.execution) == ("cuda", "async")
    assert prof.device.specs["sm_count"] == 108
    gemm = prof.device.op_classes["gemm"].params
    assert gemm["peak_macs_per_s:fp16"] > 5 * gemm["peak_macs_per_s"]  # tensor cores
    assert prof.device.launch_latency_s > 0 and prof.device.kernel_floor_s > 0


def _gpu_profiles() -> list[str]:
    return sorted(e.name for e in list_profiles() if e.source == "builtin"
                  and e.kind == "spec-derived" and not e.name.startswith("paper"))


def test_no_kernel_faster_than_the_spec_sheet() -> None:
    # efficiency = published fraction of the generation x fitted residual, both <= 1: a GEMM
    # never beats MACs / peak, a bytes-bound kernel never beats bytes / bandwidth (conv may,
    # by eff_conv: Winograd/FFT do fewer multiplies than direct MACs)
    for name in _gpu_profiles():
        dev = load_profile(name).device
        cuda = dev.specs["fp32_tflops"] * 1e12 / 2  # MAC/s
        bw = dev.specs["mem_bw_gbps"] * 1e9
        for cls in ("gemm", "bmm", "attention", "elementwise", "norm", "softmax"):
            prm = dev.op_classes[cls].params
            assert prm["bandwidth_Bps"] <= bw, (name, cls)
            if "peak_macs_per_s" in prm:
                assert prm["peak_macs_per_s"] <= cuda, (name, cls)
                tensor = dev.specs["fp16_tensor_tflops"]
                if tensor is not None:
                    assert prm["peak_macs_per_s:fp16"] <= tensor * 1e12 / 2, (name, cls)


def test_efficiency_is_the_generations_published_fraction_times_one_residual() -> None:
    effs = {}
    for name in _gpu_profiles():
        gen = load_profile(name).provenance["generation_efficiency"]
        for col, key in (("sgemm", "eff_cuda"), ("tensor", "eff_tensor"),
                         ("bandwidth", "eff_bw")):
            frac = gen["fractions"][col]
            assert 0.0 < frac["fraction"] <= 1.0
            # every figure names its source, or says that none was found
            assert ("source" in frac) == frac["basis"].startswith("published"), (name, col)
            assert gen["efficiencies"][key] == pytest.approx(
                frac["fraction"] * gen["residuals"][key])
        effs[name] = gen["efficiencies"]
    # one residual for all GPUs: the ratio of two GPUs' efficiencies is that of their
    # generations' published fractions (GA102's SGEMM reaches about half its fp32 headline)
    a100 = load_profile("a100").provenance["generation_efficiency"]["fractions"]
    g3090 = load_profile("3090").provenance["generation_efficiency"]["fractions"]
    assert effs["rtx3090"]["eff_cuda"] / effs["a100-sxm4-40gb"]["eff_cuda"] == pytest.approx(
        g3090["sgemm"]["fraction"] / a100["sgemm"]["fraction"])
    assert g3090["sgemm"]["fraction"] < a100["sgemm"]["fraction"]


def test_pascal_fp16_efficiency_is_its_sgemm_efficiency() -> None:
    gen = load_profile("gtx1080ti").provenance["generation_efficiency"]
    assert gen["fractions"]["tensor"]["fraction"] == gen["fractions"]["sgemm"]["fraction"]


def test_torch_device_names_resolve() -> None:
    for row in _csv_rows():
        cell = row["torch_device_name"]
        if "same string as SXM" in cell:
            continue  # H200 NVL reports "NVIDIA H200" like the SXM card
        # "NVIDIA GeForce GTX 1080 Ti (older drivers: '...')": drop the annotation only
        main = cell.split(" (")[0] if ":" in cell else cell
        prof = load_profile(main)
        assert (prof.device.specs["gpu"], prof.device.specs["variant"]) == (row["gpu"],
                                                                            row["variant"])


@pytest.mark.parametrize("name,expected", [
    ("a100", "a100-sxm4-40gb"), ("A100", "a100-sxm4-40gb"), ("A100-SXM4-80GB", "a100-sxm4-80gb"),
    ("nvidia a100-sxm4-40gb", "a100-sxm4-40gb"), ("NVIDIA A100 80GB PCIe", "a100-pcie-80gb"),
    ("rtx8000", "rtx8000"), ("Quadro RTX 8000", "rtx8000"), ("2080ti", "rtx2080ti"),
    ("3090", "rtx3090"), ("a6000", "a6000"), ("v100", "v100-pcie-32gb"), ("titanx", "titanx"),
    ("1080ti", "gtx1080ti"), ("h100", "h100-sxm5"), ("NVIDIA H100 80GB HBM3", "h100-sxm5"),
    ("GeForce GTX 1080 Ti", "gtx1080ti"), ("NVIDIA TITAN X (Pascal)", "titanx"),
])
def test_names_and_aliases_case_insensitive(name: str, expected: str) -> None:
    assert load_profile(name).name == expected
    assert load_profile(name.upper()).name == expected


@pytest.mark.parametrize("paper,variant,memory_gb", [
    ("RTX-8000", "PCIe 48GB (active)", 48), ("TitanX", "PCIe 12GB", 12),
    ("1080Ti", "PCIe 11GB (reference/FE)", 11), ("2080Ti", "reference board (FE values in notes)", 11),
    ("3090", "reference/FE 24GB", 24), ("A6000", "PCIe 48GB", 48), ("V100", "PCIe 32GB", 32),
    ("A100", "SXM4 40GB", 40),
])
def test_paper_names_map_to_the_papers_variants(paper: str, variant: str, memory_gb: int) -> None:
    specs = load_profile(paper).device.specs
    assert specs["variant"] == variant
    assert specs["memory_gb"] == memory_gb  # Table A1 of the paper


def test_unknown_gpu_suggests_closest() -> None:
    with pytest.raises(UnknownNameError, match="Did you mean 'a100'"):
        load_profile("a1000")
    with pytest.raises(UnknownNameError, match="rtx8000"):
        load_profile("rtx800")


# ---- dtypes -----------------------------------------------------------------------------------

def test_dtypes_per_architecture() -> None:
    assert load_profile("rtx8000").device.dtypes == ("fp32", "fp16")  # Turing: no bf16/tf32
    assert load_profile("v100").device.dtypes == ("fp32", "fp16")
    assert load_profile("titanx").device.dtypes == ("fp32", "fp16")
    assert set(load_profile("a100").device.dtypes) == {"fp32", "tf32", "fp16", "bf16"}


def test_pascal_fp16_runs_at_fp32_rate() -> None:
    gemm = load_profile("titanx").device.op_classes["gemm"].params
    assert gemm["peak_macs_per_s:fp16"] == gemm["peak_macs_per_s"]  # no tensor cores


def test_geforce_fp16_uses_fp32_accumulate_rate() -> None:
    g3090 = load_profile("3090").device.op_classes["gemm"].params
    a6000 = load_profile("a6000").device.op_classes["gemm"].params
    # same GA102 chip: the GeForce card runs fp16 tensor math with fp32 accumulate at half rate
    assert g3090["peak_macs_per_s:fp16"] < 0.5 * a6000["peak_macs_per_s:fp16"]


def test_bf16_on_turing_raises_clearly() -> None:
    with pytest.raises(InvalidArgumentError, match=r"bf16.*rtx8000.*fp32, fp16"):
        ftmodel.predict_latency(nn.Linear(4, 4), "eager", "rtx8000", inputs=torch.randn(1, 4),
                                dtype="bf16")


# ---- host and device halves -------------------------------------------------------------------

def test_host_profile_as_device_raises() -> None:
    with pytest.raises(ProfileError, match=r"host-only.*host='paper-host'"):
        ftmodel.predict_latency(nn.Linear(4, 4), "eager", "paper-host", inputs=torch.randn(1, 4))


def test_device_profile_as_host_raises() -> None:
    with pytest.raises(ProfileError, match=r"spec-derived GPU device profile.*device='a100'"):
        load_host_profile("a100")


def test_device_profile_as_host_raises_in_predict() -> None:
    with pytest.raises(ProfileError, match="spec-derived GPU device profile"):
        ftmodel.predict_latency(nn.Linear(4, 4), "eager", "rtx8000", inputs=torch.randn(1, 4),
                                host="a100")


def test_default_host_is_loadable() -> None:
    host = load_host_profile("paper-host")
    assert isinstance(host, HostProfile)
    assert host.frameworks["eager"].per_event_s["kernel:conv"] > 0
    assert load_profile("a100").host is not None and load_profile("a100").host.name == "paper-host"


def test_default_host_warns(resnet50: nn.Module) -> None:
    p = ftmodel.predict_latency(resnet50, "eager", "a100", inputs=_images)
    assert any("default 'paper-host'" in w for w in p.warnings)


# ---- launches ---------------------------------------------------------------------------------

def _trace_launches(dtype: str) -> float:
    if not TRACES_CSV.is_file():
        pytest.skip(f"{TRACES_CSV} not found")
    with open(TRACES_CSV, newline="", encoding="utf-8") as f:
        rows = [r for r in csv.DictReader(f) if r["model"] == "resnet50"
                and r["framework"] == "PyTorch eager" and r["precision"] == dtype]
    counts = sorted(int(r["launch_calls"]) for r in rows)
    return float(counts[len(counts) // 2])


@pytest.mark.parametrize("dtype", ["fp32", "fp16"])
def test_resnet50_eager_launches_match_profiler(resnet50: nn.Module, dtype: str) -> None:
    measured = _trace_launches(dtype)  # ~249 kernels (fp32), ~372 (fp16) for 174 aten kernels
    tdtype = torch.float32 if dtype == "fp32" else torch.float16
    prog = eager.lower(ftmodel.trace(resnet50, _images, 16, dtype=tdtype))
    expanded = expand_launches(prog, load_profile("rtx8000").device, "eager")
    assert prog.n_launches == 174
    assert abs(expanded.n_launches - measured) <= 0.1 * measured


def test_resnet50_predicted_launches_match_profiler(resnet50: nn.Module) -> None:
    p = ftmodel.predict_latency(resnet50, "eager", "rtx8000", 16, inputs=_images)
    assert abs(p.n_launches - _trace_launches("fp32")) <= 0.1 * _trace_launches("fp32")


def _ort_trace_launches(dtype: str) -> float:
    """Median over batch sizes of the per-batch median kernel count of ResNet-50 under ONNX
    Runtime (CUDA EP) in the traces. Each run wrote two files, fp32 first, then fp16."""
    if not TRACES_CSV.is_file():
        pytest.skip(f"{TRACES_CSV} not found")
    with open(TRACES_CSV, newline="", encoding="utf-8") as f:
        rows = [r for r in csv.DictReader(f) if r["model"] == "resnet50"
                and r["framework"] == "ONNXRuntime-CUDA" and r["precision"].startswith("fp32 (1st")]
    runs: dict[tuple[str, str], list[tuple[str, int]]] = {}
    for r in rows:
        name = r["file"].split("/")[-1]
        runs.setdefault((r["dir"], name.split(".")[0]), []).append((name, int(r["kernels"])))
    by_batch: dict[int, list[int]] = {}
    for (d, _), files in runs.items():
        files.sort()
        i = 0 if dtype == "fp32" else 1
        if i < len(files):
            by_batch.setdefault(int(d.split("batch")[-1]), []).append(files[i][1])
    return float(statistics.median(statistics.median(v) for v in by_batch.values()))


@pytest.mark.parametrize("dtype", ["fp32", "fp16"])
def test_resnet50_onnxruntime_launches_match_profiler(dtype: str) -> None:
    pytest.importorskip("onnxruntime")
    # fp32: 73 (batch 1), 129-130 (16), 114-115 (32, 64) kernels; fp16: 240, 279-283, 268, 258
    measured = _ort_trace_launches(dtype)
    torch.manual_seed(0)
    model = torchvision.models.resnet50(weights=None).eval()  # ONNX export needs real weights
    p = ftmodel.predict_latency(model, "onnxruntime", "rtx8000", 1, inputs=_images, dtype=dtype)
    assert abs(p.n_launches - measured) <= 0.1 * measured, (p.n_launches, measured)


# ---- predictions of the paper's findings ------------------------------------------------------

@pytest.mark.parametrize("which", ["resnet50", "bert"])
def test_flat_in_batch_up_to_the_crossover(which: str, request: pytest.FixtureRequest) -> None:
    model = request.getfixturevalue(which)
    inputs = _images if which == "resnet50" else None
    p1 = ftmodel.predict_latency(model, "eager", "rtx8000", 1, inputs=inputs)
    x = p1.crossover_batch
    assert x is not None and x > 2
    flat = [b for b in (1, 2, 4, 8, 16) if b <= x / 2]
    ps = ftmodel.predict_latency(model, "eager", "rtx8000", flat + [int(4 * x)], inputs=inputs)
    for p in ps[:-1]:
        assert p.latency_s < 1.1 * p1.latency_s, (p.batch, p.latency_s, p1.latency_s)
        assert p.regime == "framework-bound"
    assert ps[-1].latency_s > 2 * p1.latency_s  # compute-bound well past the crossover
    assert ps[-1].regime == "compute-bound"


def test_bert_batch1_not_faster_on_a100_than_v100(bert: nn.Module) -> None:
    a100 = ftmodel.predict_latency(bert, "eager", "a100", 1)
    v100 = ftmodel.predict_latency(bert, "eager", "v100", 1)
    assert a100.regime == v100.regime == "framework-bound"
    assert a100.latency_s >= 0.95 * v100.latency_s  # 2.75x the peak buys nothing


def test_doubling_bert_width_barely_changes_batch1(bert: nn.Module) -> None:
    # Finding 4: width costs nothing *while framework-bound*. Doubling the width is 4x the GEMM
    # MACs, so at batch 1 the wide model does about BERT-Base's batch-4 work. In fp16 BERT-Base
    # on the RTX 8000 is framework-bound to batch ~20 (measured knee ~22 in latency.csv): the
    # claim's condition holds with room to spare. In fp32 its measured knee is at batch ~5
    # (eager 10.5 ms at batch 1, 11.3 ms at 4, 20 ms at 8; ONNX Runtime, compute-bound, 4.2 ms
    # at batch 1 in the paper's Figure 3), so 4x the MACs reaches the knee: not the claim's case.
    wide = _hf("BertModel", transformers.BertConfig(hidden_size=1536, intermediate_size=6144,
                                                    num_attention_heads=24))
    base = ftmodel.predict_latency(bert, "eager", "rtx8000", 1, dtype="fp16")
    p = ftmodel.predict_latency(wide, "eager", "rtx8000", 1, dtype="fp16")
    assert p.macs > 3.5 * base.macs
    assert p.regime == base.regime == "framework-bound"
    assert abs(p.latency_s / base.latency_s - 1.0) < 0.10
    # ...but the wider model turns compute-bound at a smaller batch
    assert p.crossover_batch is not None and base.crossover_batch is not None
    assert p.crossover_batch < base.crossover_batch


def test_funnel_slower_than_bert_despite_fewer_macs(bert: nn.Module) -> None:
    funnel = _hf("FunnelModel", transformers.FunnelConfig())
    b = ftmodel.predict_latency(bert, "eager", "rtx8000", 1)
    f = ftmodel.predict_latency(funnel, "eager", "rtx8000", 1)
    assert f.macs < b.macs
    assert f.n_launches > b.n_launches
    assert f.latency_s > b.latency_s
