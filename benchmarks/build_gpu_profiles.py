"""Generate the built-in GPU profiles: one JSON per row of benchmarks/data/gpu_specs.csv.

    .venv/bin/python benchmarks/build_gpu_profiles.py          # writes ftmodel/hardware/builtin/

Each profile is ``kind: "spec-derived"``: its device half comes from the spec sheet (SMs, peak
rates, memory bandwidth) and from efficiency parameters fitted on the Framework Tax paper's
measurements (``benchmarks/gpu_efficiency.json``, written by ``fit_gpu_efficiency.py``); its
host half is a *default* — the dispatch costs of the paper's Xeon hosts — and predictions that
use it carry a warning.

Efficiencies per architecture generation (``benchmarks/gpu_generations.json``): each GPU's
``eff_cuda``, ``eff_tensor`` and ``eff_bw`` are its generation's published achieved fraction of
peak (cuBLAS SGEMM, tensor-core GEMM, copy/STREAM bandwidth; a chip entry such as GA102 overrides
its generation) times the residual that ``fit_gpu_efficiency.py`` fits for all GPUs
(``gpu_efficiency.json``: how much of that large-GEMM / large-copy rate a model's kernels keep).
Both factors are at most 1, so a kernel never runs faster than MACs / peak or bytes / bandwidth
(except ``conv``, whose ``eff_conv`` is cuDNN's Winograd/FFT saving over direct MACs). A
generation without a published figure gets the geometric mean of the generations with one, and
its profile's provenance says so.

Per op class the device half is a roofline (``ftmodel.estimate.kernels``):
``time = max((macs + half_macs) / peak, (bytes + half_bytes) / bandwidth, floor)`` with

* ``peak_macs_per_s`` = fp32 CUDA-core rate × ``eff_cuda`` (MACs = FLOPs / 2), and per math dtype
  ``peak_macs_per_s:fp16`` / ``:bf16`` / ``:tf32`` = the dense tensor-core rate × ``eff_tensor``.
  GeForce cards use the fp32-accumulate tensor rate (half the fp16-accumulate headline), which is
  what cuBLAS/cuDNN use for PyTorch fp16. Pascal (GP102) has no tensor cores and runs native fp16
  at 1/64 rate; cuBLAS/cuDNN then compute fp16 tensors in fp32 (pseudo-fp16), so fp16 keeps the
  fp32 rate and gains only from halved bytes — which the paper's Titan X / 1080 Ti data show
  (ResNet-50 batch 128: fp16 1.3× faster than fp32, not 64× slower).
* On Ampere and newer, ``conv`` in fp32 runs on TF32 tensor cores (``torch.backends.cudnn.allow_tf32``
  defaults to True) while ``gemm``/``bmm`` stay fp32 (``torch.backends.cuda.matmul.allow_tf32``
  defaults to False since PyTorch 1.12); dtype ``tf32`` puts both on TF32.
* grouped / depthwise convolution runs on CUDA cores at ``eff_grouped`` of the MAC-class rate in
  every dtype (cuDNN has no tensor-core depthwise kernels).
* ``half_macs`` = ``ramp_mac_s`` × peak and ``half_bytes`` = ``ramp_byte_s`` × bandwidth: a kernel
  reaches half its peak when its ideal time equals the ramp time, so the half-work size scales
  with the GPU's throughput. A generation with a ramp measured on live CUDA-graph replays
  (``gpu_generations.json``'s ``kernel_ramp``: Hopper, 1.81 µs on an H100, ``kernel_ramp.py``)
  takes it for both, in place of the ramps fitted on the paper's GPUs (10 µs and 6.3 µs). A GPU
  predicted with nothing measured on it (``build(..., left_out=name)``) takes the ramp its
  generation's other GPUs measured (``kernel_ramp_left_out``: the H100 left out, Hopper's ramp
  measured on the H200), or the fitted ramps if there is none.
* A generation with a convolution ramp measured on a per-kernel trace (``gpu_generations.json``'s
  ``conv_ramp``: Hopper, 3.52 µs per kernel on an H200, ``kernel_ramp.py --trace``) gives it to
  ``conv`` and ``conv_grouped`` and to the helper kernels of a convolution (op classes
  ``aux@convolution``, ``aux@_convolution``, ``aux@conv``: the layout transposes around cuDNN's
  tensor-core kernels), in place of the generation's ramp: on that trace a convolution's kernels
  took 3.52 µs each beyond their work, every other kernel 1.25 µs.
* ``aux``: the other helper kernels of ``launches_per_op`` (see ``ftmodel.estimate.launches``)
  cost the kernel floor.

Dtypes: fp32 and fp16 everywhere; bf16 and tf32 from Ampere on (Volta/Turing have neither).
Names: a short name (``a100``, ``rtx8000``, ``v100``, ...), the torch device names of the CSV, and
the paper's labels (RTX-8000, TitanX, 1080Ti, 2080Ti, 3090, A6000, V100, A100), which resolve to
the variants the paper used (Table A1: V100 32 GB — the PCIe card, whose 14 TFLOPS fp32 matches
the table's 28.26 non-tensor fp16 TFLOPS —, A100 40 GB SXM4).
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gpu_common import SPECS_CSV, GpuSpec, gpu_specs  # noqa: E402

from ftmodel.hardware.profile import (  # noqa: E402
    DeviceProfile,
    FrameworkHost,
    HardwareProfile,
    HostOnlyProfile,
    HostProfile,
    OpClassData,
    write_host_profile,
    write_profile,
)

ROOT = Path(__file__).resolve().parents[1]
BUILTIN = ROOT / "ftmodel" / "hardware" / "builtin"
PARAMS = ROOT / "benchmarks" / "gpu_efficiency.json"
GENERATIONS = ROOT / "benchmarks" / "gpu_generations.json"
# efficiency parameter -> column of gpu_generations.json it scales
FRACTION_OF = {"eff_cuda": "sgemm", "eff_tensor": "tensor", "eff_bw": "bandwidth"}

MAC_CLASSES = ("gemm", "bmm", "conv", "attention")
CONV_CLASSES = ("conv", "conv_grouped")
# a convolution kernel's operator as ``ftmodel.estimate.kernels.op_name`` names it: ATen
# (eager, inductor, CUDA graphs), TorchScript's graph and ONNX
CONV_OP_NAMES = ("convolution", "_convolution", "conv")
BYTE_CLASSES = ("elementwise", "norm", "softmax", "reduction", "pool", "embedding", "copy",
                "other")

# (gpu, variant) -> (profile name, extra aliases)
NAMES: dict[tuple[str, str], tuple[str, tuple[str, ...]]] = {
    ("GTX 1080 Ti", "PCIe 11GB (reference/FE)"): ("gtx1080ti", ("1080ti", "1080 Ti", "GTX 1080 Ti")),
    ("V100", "SXM2 16GB"): ("v100-sxm2-16gb", ("V100-SXM2-16GB",)),
    ("V100", "SXM2 32GB"): ("v100-sxm2-32gb", ("V100-SXM2-32GB",)),
    ("V100", "PCIe 16GB"): ("v100-pcie-16gb", ("V100-PCIE-16GB",)),
    ("V100", "PCIe 32GB"): ("v100-pcie-32gb", ("v100", "V100-PCIE-32GB", "Tesla V100")),
    ("V100S", "PCIe 32GB"): ("v100s", ("V100S-PCIE-32GB",)),
    ("RTX 2080 Ti", "reference board (FE values in notes)"): ("rtx2080ti", ("2080ti", "2080 Ti")),
    ("Quadro RTX 8000", "PCIe 48GB (active)"): ("rtx8000", ("RTX-8000", "quadro-rtx8000")),
    ("T4", "PCIe 16GB 70W"): ("t4", ()),
    ("RTX 3090", "reference/FE 24GB"): ("rtx3090", ("3090", "GeForce RTX 3090")),
    ("RTX A6000", "PCIe 48GB"): ("a6000", ("rtx-a6000",)),
    ("A10", "PCIe 24GB 150W"): ("a10", ()),
    ("A100", "SXM4 40GB"): ("a100-sxm4-40gb", ("a100", "A100-40GB", "A100-SXM4-40GB")),
    ("A100", "PCIe 40GB"): ("a100-pcie-40gb", ("A100-PCIE-40GB",)),
    ("A100", "SXM4 80GB"): ("a100-sxm4-80gb", ("A100-SXM4-80GB", "A100-80GB")),
    ("A100", "PCIe 80GB"): ("a100-pcie-80gb", ("A100-PCIE-80GB",)),
    ("L4", "PCIe 24GB 72W"): ("l4", ()),
    ("L40S", "PCIe 48GB 350W"): ("l40s", ()),
    ("RTX 4090", "FE 24GB"): ("rtx4090", ("4090",)),
    ("H100", "SXM5 80GB"): ("h100-sxm5", ("h100", "H100-SXM5-80GB", "H100-SXM")),
    ("H100", "PCIe 80GB"): ("h100-pcie", ("H100-PCIE-80GB",)),
    ("H200", "SXM 141GB"): ("h200", ("h200-sxm",)),
    ("H200", "NVL 141GB (PCIe)"): ("h200-nvl", ()),
    ("Titan X (Pascal)", "PCIe 12GB"): ("titanx", ("Titan X", "TitanX", "Titan X (Pascal)")),
}
# torch device names shared by two rows resolve to the first: H200 NVL reports "NVIDIA H200" too
SHARED_TORCH_NAMES = {"h200-nvl"}


@functools.lru_cache(maxsize=1)
def generation_table(path: Path = GENERATIONS) -> dict[str, Any]:
    """``gpu_generations.json``: published achieved fractions of peak per generation / chip."""
    return dict(json.loads(path.read_text()))


def _published(entry: dict[str, Any] | None) -> float | None:
    return None if not entry or entry.get("fraction") is None else float(entry["fraction"])


def _generation_mean(column: str) -> float:
    """Geometric mean of a column over the generations that have a published figure."""
    vals = [f for g in generation_table()["generations"].values()
            if (f := _published(g.get(column))) is not None]
    return math.exp(sum(math.log(v) for v in vals) / len(vals))


def generation_fractions(spec: GpuSpec) -> dict[str, dict[str, Any]]:
    """Column (sgemm, tensor, bandwidth) -> {fraction, basis, source} for ``spec``'s chip or
    generation; Pascal (no tensor cores) runs fp16 at the fp32 rate, so its tensor column is its
    sgemm column."""
    table = generation_table()
    gen = table["generations"].get(spec.family, {})
    chip = table.get("chips", {}).get(spec.arch.split()[-1], {})
    out: dict[str, dict[str, Any]] = {}
    for column in ("sgemm", "tensor", "bandwidth"):
        own = column if not (column == "tensor" and spec.fp16_tensor_tflops is None) else "sgemm"
        for level, entry in ((spec.arch.split()[-1], chip.get(own)), (spec.family, gen.get(own))):
            if entry is not None and (f := _published(entry)) is not None:
                out[column] = {"fraction": f, "basis": f"published ({level})",
                               "measured": entry["measured"], "source": entry["source"]}
                break
        else:
            out[column] = {"fraction": _generation_mean(own),
                           "basis": f"no published figure for {spec.family}: geometric mean of "
                                    "the generations with one (the fitted all-GPU value)"}
    return out


def _generation_entries(spec: GpuSpec) -> tuple[dict[str, Any], dict[str, Any]]:
    """``spec``'s chip entry and generation entry of ``gpu_generations.json`` (empty if none),
    in the order a figure is looked up."""
    table = generation_table()
    return (table.get("chips", {}).get(spec.arch.split()[-1], {}),
            table["generations"].get(spec.family, {}))


def generation_ramp(spec: GpuSpec, left_out: str | None = None) -> dict[str, Any] | None:
    """``spec``'s chip's or generation's measured per-kernel ramp (``kernel_ramp``), if any.

    ``left_out``: a profile name whose own measurements may not be used. A ramp measured on that
    GPU (``kernel_ramp``'s ``gpu``) is replaced by the one its generation's other GPUs measured
    (``kernel_ramp_left_out[left_out]``), or by none (the fitted ramps)."""
    for entry in _generation_entries(spec):
        ramp = entry.get("kernel_ramp")
        if not ramp:
            continue
        if left_out is not None and ramp.get("gpu") == left_out:
            other = entry.get("kernel_ramp_left_out", {}).get(left_out)
            return dict(other) if other else None
        return dict(ramp)
    return None


def generation_conv_ramp(spec: GpuSpec, left_out: str | None = None) -> dict[str, Any] | None:
    """``spec``'s chip's or generation's per-kernel ramp of convolution kernels (``conv_ramp``),
    if one was measured, and not on ``left_out``."""
    for entry in _generation_entries(spec):
        ramp = entry.get("conv_ramp")
        if ramp and not (left_out is not None and ramp.get("gpu") == left_out):
            return dict(ramp)
    return None


def scaled_efficiency(spec: GpuSpec, eff: dict[str, float], left_out: str | None = None
                      ) -> dict[str, float]:
    """``eff`` with ``eff_cuda``/``eff_tensor``/``eff_bw`` as fitted residuals multiplied by the
    generation's published fractions (the GPU's own efficiencies), and, where the generation has
    one measured, its per-kernel ramp in place of the fitted ramps (``generation_ramp``: none
    measured on ``left_out``) and its convolutions' ramp (``conv_ramp_s``, see
    ``generation_conv_ramp``)."""
    fr = generation_fractions(spec)
    out = {**eff, **{k: eff[k] * fr[col]["fraction"] for k, col in FRACTION_OF.items()
                     if k in eff}}
    ramp = generation_ramp(spec, left_out)
    if ramp is not None:
        out["ramp_mac_s"] = out["ramp_byte_s"] = float(ramp["seconds"])
    conv = generation_conv_ramp(spec, left_out)
    if conv is not None:
        out["conv_ramp_s"] = float(conv["seconds"])
    return out


def dtypes_of(spec: GpuSpec) -> tuple[str, ...]:
    if spec.family in ("Pascal", "Volta", "Turing"):
        return ("fp32", "fp16")
    return ("fp32", "tf32", "fp16", "bf16")


def mac_ramp_s(eff: dict[str, float], cls: str) -> float:
    """The per-kernel ramp of MAC class ``cls``: a convolution's own where the generation has
    one (``conv_ramp_s``), else the MAC ramp."""
    return eff.get("conv_ramp_s", eff["ramp_mac_s"]) if cls in CONV_CLASSES else eff["ramp_mac_s"]


def mac_params(spec: GpuSpec, eff: dict[str, float], cls: str) -> dict[str, float]:
    """Roofline parameters of one MAC class: peaks per math dtype and ramp sizes."""
    bw = spec.mem_bw_gbps * 1e9 * eff["eff_bw"]
    cuda = spec.fp32_tflops * 1e12 / 2 * eff["eff_cuda"]  # MAC/s
    if cls == "conv":  # cuDNN's Winograd/FFT algorithms do fewer multiplies than direct MACs
        cuda *= eff.get("eff_conv", 1.0)
    peaks = {"": cuda}
    if spec.fp16_tensor_tflops is None:  # Pascal: pseudo-fp16, fp32 math
        peaks["fp16"] = cuda
    else:
        def tensor(tflops: float) -> float:  # dense tensor-core TFLOPS -> MAC/s
            return tflops * 1e12 / 2 * eff["eff_tensor"]
        peaks["fp16"] = tensor(spec.fp16_tensor_tflops)
        if spec.bf16_tensor_tflops:
            peaks["bf16"] = tensor(spec.bf16_tensor_tflops)
        if spec.tf32_tensor_tflops:
            peaks["tf32"] = tensor(spec.tf32_tensor_tflops)
            if cls == "conv":  # cuDNN allow_tf32 is on by default
                peaks["fp32"] = peaks["tf32"]
    ramp_mac_s = mac_ramp_s(eff, cls)
    byte_ramp_s = (eff.get("conv_ramp_s", eff["ramp_byte_s"]) if cls in CONV_CLASSES
                   else eff["ramp_byte_s"])
    out = {"bandwidth_Bps": bw, "half_bytes": byte_ramp_s * bw}
    if eff.get("tile_outputs"):  # tile/wave quantisation over the SMs (estimate.kernels)
        out["wave_slots"] = float(spec.sm_count)
        out["tile_outputs"] = float(eff["tile_outputs"])
    for dt, peak in peaks.items():
        sfx = f":{dt}" if dt else ""
        out[f"peak_macs_per_s{sfx}"] = peak
        out[f"half_macs{sfx}"] = ramp_mac_s * peak
    return out


def device_half(spec: GpuSpec, name: str, eff: dict[str, float],
                launches: dict[str, dict[str, float]], left_out: str | None = None
                ) -> DeviceProfile:
    eff = scaled_efficiency(spec, eff, left_out)
    bw = spec.mem_bw_gbps * 1e9 * eff["eff_bw"]
    byte = {"bandwidth_Bps": bw, "half_bytes": eff["ramp_byte_s"] * bw}
    classes = {c: OpClassData("roofline", params=mac_params(spec, eff, c)) for c in MAC_CLASSES}
    grouped = mac_params(spec, eff, "conv_grouped")
    cuda_grouped = grouped["peak_macs_per_s"] * eff["eff_grouped"]
    classes["conv_grouped"] = OpClassData("roofline", params={
        "bandwidth_Bps": bw, "half_bytes": grouped["half_bytes"],
        "peak_macs_per_s": cuda_grouped,
        "half_macs": mac_ramp_s(eff, "conv_grouped") * cuda_grouped})
    classes.update({c: OpClassData("roofline", params=dict(byte)) for c in BYTE_CLASSES})
    classes["aux"] = OpClassData("roofline", params={"bandwidth_Bps": bw, "floor_s": 0.0})
    if "conv_ramp_s" in eff:  # a convolution's helpers (layout transposes) are its kind
        classes.update({f"aux@{op}": OpClassData("roofline", params={
            "bandwidth_Bps": bw, "floor_s": eff["conv_ramp_s"]}) for op in CONV_OP_NAMES})
    table = {fw: dict(t) for fw, t in launches.items()}
    if spec.fp16_tensor_tflops is None:  # no tensor cores: no NCHW<->NHWC transposes in fp16
        for t in table.values():
            t.pop("conv:fp16", None)
    return DeviceProfile(
        name=f"{spec.gpu} {spec.variant}", type="cuda", execution="async", op_classes=classes,
        launch_latency_s=eff["launch_latency_s"], sync_s=eff["sync_s"],
        kernel_floor_s=eff["kernel_floor_s"], dtypes=dtypes_of(spec),
        specs={"gpu": spec.gpu, "variant": spec.variant, "architecture": spec.arch,
               "compute_capability": spec.compute_capability, "sm_count": spec.sm_count,
               "fp32_tflops": spec.fp32_tflops, "fp16_tensor_tflops": spec.fp16_tensor_tflops,
               "bf16_tensor_tflops": spec.bf16_tensor_tflops,
               "tf32_tensor_tflops": spec.tf32_tensor_tflops, "memory_gb": spec.memory_gb,
               "mem_bw_gbps": spec.mem_bw_gbps, "l2_cache_mb": spec.l2_mb,
               "torch_device_names": list(spec.torch_names), "source": spec.source,
               "notes": spec.notes},
        launches_per_op=table)


def host_half(name: str, h: dict[str, Any]) -> HostProfile:
    fws = {fw: FrameworkHost(per_event_s=dict(v["per_event_s"]), per_call_s=float(v["per_call_s"]))
           for fw, v in h["frameworks"].items()}
    return HostProfile(name=name, cpu=h["cpu"], threads=1, frameworks=fws)


def build(params: dict[str, Any], specs: list[GpuSpec], left_out: str | None = None
          ) -> tuple[list[HardwareProfile], list[HostOnlyProfile]]:
    """The spec-derived profiles of ``specs``; ``left_out`` names a profile whose own live
    measurements stay out (a GPU predicted with nothing measured on it: its generation's ramp
    comes from the generation's other GPUs, ``generation_ramp``)."""
    eff = params["device"]
    hosts = {n: host_half(n, h) for n, h in params["hosts"].items()}
    profiles = []
    for spec in specs:
        name, extra = NAMES[(spec.gpu, spec.variant)]
        torch_names = () if name in SHARED_TORCH_NAMES else spec.torch_names
        aliases = tuple(dict.fromkeys([*extra, *torch_names]))
        host_name = params["gpu_hosts"].get(name, "paper-host")
        profiles.append(HardwareProfile(
            name=name, kind="spec-derived",
            device=device_half(spec, name, eff, params["launches_per_op"], left_out),
            host=hosts[host_name],
            provenance={
                "generated_by": "benchmarks/build_gpu_profiles.py",
                "specs": "benchmarks/data/gpu_specs.csv",
                "efficiency": "benchmarks/gpu_efficiency.json (fit_gpu_efficiency.py on "
                              "benchmarks/data/framework_tax/latency.csv)",
                "host": f"default host {host_name!r}: {params['hosts'][host_name]['note']}",
                "fitted_on_gpus": params.get("fitted_on_gpus", []),
                "generation_efficiency": {
                    "generation": spec.family, "chip": spec.arch.split()[-1],
                    "table": "benchmarks/gpu_generations.json",
                    "fractions": generation_fractions(spec),
                    "residuals": {k: eff[k] for k in FRACTION_OF if k in eff},
                    "efficiencies": {k: v for k, v in scaled_efficiency(spec, eff).items()
                                     if k in FRACTION_OF},
                    "kernel_ramp": generation_ramp(spec, left_out) or {
                        "basis": "the per-kernel ramps fitted on the paper's GPUs"},
                    **({"conv_ramp": conv} if (conv := generation_conv_ramp(spec, left_out))
                       else {})},
            },
            aliases=aliases))
    host_only = [HostOnlyProfile(
        name=n, kind="spec-derived", host=hosts[n],
        provenance={"generated_by": "benchmarks/build_gpu_profiles.py",
                    "note": params["hosts"][n]["note"]},
        aliases=tuple(params["hosts"][n].get("aliases", ()))) for n in params["hosts"]]
    return profiles, host_only


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--params", type=Path, default=PARAMS)
    ap.add_argument("--out", type=Path, default=BUILTIN)
    args = ap.parse_args(argv)
    params = json.loads(args.params.read_text())
    specs = gpu_specs(SPECS_CSV)
    missing = [(s.gpu, s.variant) for s in specs if (s.gpu, s.variant) not in NAMES]
    if missing:
        raise SystemExit(f"no profile name for CSV rows {missing}; add them to NAMES")
    profiles, hosts = build(params, specs)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "hosts").mkdir(exist_ok=True)
    for old in [*args.out.glob("*.json"), *(args.out / "hosts").glob("*.json")]:
        old.unlink()
    for p in profiles:
        write_profile(p, args.out / f"{p.name}.json")
    for h in hosts:
        write_host_profile(h, args.out / "hosts" / f"{h.name}.json")
    print(f"wrote {len(profiles)} GPU profiles and {len(hosts)} host profiles to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
