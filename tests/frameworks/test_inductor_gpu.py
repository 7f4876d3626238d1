"""inductor and inductor-cudagraphs on GPU profiles without a CUDA device: the CPU schedule read
as the GPU program, and host costs from a calibration or a cited prior."""

from __future__ import annotations

import shutil
from dataclasses import replace

import pytest
import torch
from torch import nn

import ftmodel
from ftmodel.api import Predictor
from ftmodel.errors import BackendUnavailable
from ftmodel.frameworks import inductor as ind
from ftmodel.hardware.host_priors import (
    CALL_PER_EAGER,
    COMPILED_CALL_S,
    TRITON_LAUNCH_S,
    TRITON_PER_EAGER,
    inductor_gpu_host,
)
from ftmodel.hardware.profile import FrameworkHost
from ftmodel.hardware.registry import list_profiles, load_profile

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("g++") is None and shutil.which("c++") is None,
                       reason="inductor's CPU target needs a C++ compiler"),
    pytest.mark.skipif(torch.cuda.is_available(),
                       reason="with a CUDA device inductor compiles for it instead"),
]


def _cnn() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
                         nn.Conv2d(16, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10)).eval()


def _img(b: int) -> torch.Tensor:
    return torch.randn(b, 3, 32, 32)


GPUS = sorted({e.name for e in list_profiles()
               if e.source == "builtin" and e.path.parent.name == "builtin"})  # no host-only


def test_every_builtin_gpu_predicts_inductor_with_eagers_macs() -> None:
    model = _cnn()
    assert len(GPUS) >= 10
    for gpu in GPUS:
        eager = ftmodel.predict_latency(model, "eager", gpu, 2, inputs=_img)
        for fw in ("inductor", "inductor-cudagraphs"):
            p = ftmodel.predict_latency(model, fw, gpu, 2, inputs=_img)
            assert p.latency_s > 0, (gpu, fw)
            # fusion removes launches, not arithmetic
            assert p.macs == pytest.approx(eager.macs, rel=0.01), (gpu, fw)
            assert p.n_launches < eager.n_launches, (gpu, fw)
            text = " ".join(p.warnings)
            # the prior names its source: the H200 VM's ratios (inductor), tritonbench's
            # guards and wrapper (inductor-cudagraphs)
            source = "H200 VM" if fw == "inductor" else "tritonbench"
            assert "CPU schedule" in text and source in text, (gpu, fw, p.warnings)


def test_cudagraph_replay_is_cheaper_on_the_host() -> None:
    model = _cnn()
    plain = ftmodel.predict_latency(model, "inductor", "a100", 1, inputs=_img)
    graph = ftmodel.predict_latency(model, "inductor-cudagraphs", "a100", 1, inputs=_img)
    assert graph.n_launches == plain.n_launches
    assert graph.overhead_s < plain.overhead_s


def test_prior_prices_triton_launches_and_externs_at_eagers_costs() -> None:
    host = load_profile("a100").host
    assert host is not None
    costs, warning = inductor_gpu_host("inductor", host)  # type: ignore[misc]
    eager = host.frameworks["eager"]
    kernel = eager.per_event_s["kernel:elementwise"] * eager.in_model.get("host_scale", 1.0)
    assert costs.per_event_s["kernel:elementwise"] == pytest.approx(TRITON_PER_EAGER * kernel)
    assert costs.per_event_s["kernel:conv"] == pytest.approx(
        eager.per_event_s["kernel:conv"] * eager.in_model.get("host_scale", 1.0))
    assert costs.per_call_s == pytest.approx(CALL_PER_EAGER * kernel)
    assert "H200 VM" in warning and host.name in warning
    graphs, graph_warning = inductor_gpu_host("inductor-cudagraphs", host)  # type: ignore[misc]
    assert graphs.per_call_s == pytest.approx(host.frameworks["cudagraphs"].per_call_s
                                              + COMPILED_CALL_S)
    assert "tritonbench" in graph_warning
    assert inductor_gpu_host("eager", host) is None


def test_the_prior_follows_the_hosts_speed() -> None:
    # a host twice as slow at eager's kernels gets a prior twice as expensive
    host = load_profile("a100").host
    assert host is not None
    eager = host.frameworks["eager"]
    slow = replace(host, frameworks={**host.frameworks, "eager": replace(
        eager, per_event_s={k: 2 * v for k, v in eager.per_event_s.items()})})
    fast_costs, _ = inductor_gpu_host("inductor", host)  # type: ignore[misc]
    slow_costs, _ = inductor_gpu_host("inductor", slow)  # type: ignore[misc]
    for kind in ("kernel:elementwise", "kernel:norm", "kernel:gemm", "kernel:conv"):
        assert slow_costs.per_event_s[kind] == pytest.approx(2 * fast_costs.per_event_s[kind])
    assert slow_costs.per_call_s == pytest.approx(2 * fast_costs.per_call_s)
    # without an eager elementwise cost: tritonbench's absolute figures
    bare = replace(host, frameworks={**host.frameworks, "eager": replace(
        eager, per_event_s={"kernel:gemm": 1e-5})})
    bare_costs, warning = inductor_gpu_host("inductor", bare)  # type: ignore[misc]
    assert bare_costs.per_event_s["kernel:norm"] == TRITON_LAUNCH_S
    assert bare_costs.per_call_s == COMPILED_CALL_S and "tritonbench" in warning


def test_the_priors_ratios_are_the_committed_h200_calibrations() -> None:
    # TRITON_PER_EAGER and CALL_PER_EAGER restate what this GPU calibration measured
    import json
    from pathlib import Path
    path = (Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "gpu-h200"
            / "h200-profile-run3-refit.json")
    frameworks = json.loads(path.read_text())["host"]["frameworks"]
    eager, inductor = frameworks["eager"], frameworks["inductor"]
    kernel = eager["per_event_s"]["kernel:elementwise"] * eager["in_model"]["host_scale"]
    launch = inductor["per_event_s"]["kernel:elementwise"] * inductor["in_model"]["host_scale"]
    assert TRITON_PER_EAGER == pytest.approx(launch / kernel, abs=0.005)
    assert CALL_PER_EAGER == pytest.approx(inductor["per_call_s"] / kernel, abs=0.005)


def test_a_gpu_calibrations_own_costs_replace_the_prior() -> None:
    prof = load_profile("a100")
    assert prof.host is not None
    measured = FrameworkHost({"kernel:elementwise": 3e-6}, per_call_s=20e-6)
    # a host profile with costs measured on a CUDA machine under inductor@cuda
    host = replace(prof.host, name="my-cuda-box",
                   frameworks={**prof.host.frameworks, "inductor@cuda": measured})
    pred = Predictor("inductor", prof, host=host)
    assert pred.fw_host is measured
    assert not any("prior" in w for w in pred.warnings)
    # the same GPU profile's own host half, calibrated there (not the built-in default)
    own = replace(prof, host=replace(prof.host, name="my-cuda-box",
                                     frameworks={**prof.host.frameworks, "inductor": measured}))
    assert Predictor("inductor", own).fw_host is measured


def test_a_cpu_calibrations_inductor_costs_do_not_price_gpu_launches() -> None:
    prof = load_profile("a100")
    assert prof.host is not None
    cpu_costs = FrameworkHost({"kernel:elementwise": 0.0}, per_call_s=16e-6)  # C++ kernels
    host = replace(prof.host, name="my-cpu",
                   frameworks={**prof.host.frameworks, "inductor": cpu_costs})
    pred = Predictor("inductor", prof, host=host)
    assert pred.fw_host is not cpu_costs
    prior, _ = inductor_gpu_host("inductor", host)  # type: ignore[misc]
    assert pred.fw_host.per_event_s["kernel:elementwise"] == prior.per_event_s[
        "kernel:elementwise"] > 0.0


def test_a_host_that_drove_a_gpu_prices_inductor_on_another_gpu_profile() -> None:
    # host= the host half of a GPU calibration (HostProfile.drives == "cuda"): its inductor
    # costs price the launches on a spec-sheet profile of that GPU; a CPU calibration's do not
    prof = load_profile("h200")
    assert prof.host is not None
    measured = FrameworkHost({"kernel:elementwise": 14e-6}, per_call_s=66e-6,
                             in_model={"host_scale": 1.2, "device_scale": 0.75})
    gpu_box = replace(prof.host, name="gpu-box", drives="cuda",
                      frameworks={**prof.host.frameworks, "inductor": measured})
    pred = Predictor("inductor", prof, host=gpu_box)
    assert pred.fw_host.per_event_s == measured.per_event_s
    assert pred.fw_host.per_call_s == measured.per_call_s
    assert not any("prior" in w for w in pred.warnings)
    # its device-side in-model term was fitted on that calibration's curves, not h200's
    assert pred.fw_host.in_model == {"host_scale": 1.2}
    cpu_box = replace(gpu_box, name="cpu-box", drives="cpu")
    prior, _ = inductor_gpu_host("inductor", cpu_box)  # type: ignore[misc]
    assert Predictor("inductor", prof, host=cpu_box).fw_host.per_event_s == prior.per_event_s


def test_a_calibrated_profile_keeps_its_device_terms_with_its_own_host() -> None:
    prof = load_profile("h200")
    assert prof.host is not None
    eager = replace(prof.host.frameworks["eager"],
                    in_model={"host_scale": 1.5, "device_scale": 0.75, "per_byte_s": 1e-12})
    own = replace(prof, kind="calibrated",
                  host=replace(prof.host, name="h200-box", drives="cuda",
                               frameworks={**prof.host.frameworks, "eager": eager}))
    assert Predictor("eager", own).fw_host.in_model == eager.in_model
    assert Predictor("eager", own, host=own).fw_host.in_model == eager.in_model  # same host
    other = Predictor("eager", load_profile("a100"), host=own)
    assert other.fw_host.in_model == {"host_scale": 1.5}


def test_running_inductor_for_a_gpu_needs_one() -> None:
    with pytest.raises(BackendUnavailable, match="CUDA device"):
        ind.runner(_cnn(), _img, 1, device="cuda")


def test_independent_loop_nests_become_separate_triton_kernels() -> None:
    from ftmodel.frameworks.inductor_cpp import independent_nests, loop_nests
    head = 'extern "C" void kernel(const float* in_ptr0, const float* in_ptr1, float* out_ptr0, ' \
           'float* out_ptr1)\n{\n'
    two_copies = head + """
    #pragma omp parallel
    {
        {
            #pragma omp for
            for(int64_t x0=0; x0<64; x0+=1) { for (long i = 0; i < 9; i++) { out_ptr0[x0] = in_ptr0[x0]; } }
        }
        {
            #pragma omp for
            for(int64_t x0=0; x0<32; x0+=1) { out_ptr1[x0] = in_ptr1[x0]; }
        }
    }
}"""
    mean_then_scale = head + """
    for(int64_t x0=0; x0<64; x0+=1) { auto tmp0 = in_ptr0[x0]; out_ptr0[x0] = tmp0; }
    for(int64_t x0=0; x0<64; x0+=1) { auto tmp1 = out_ptr0[x0] * in_ptr1[x0]; out_ptr1[x0] = tmp1; }
}"""
    assert len(loop_nests(two_copies)) == 2  # the inner loop is not a nest of its own
    assert independent_nests(two_copies) == 2  # unrelated conversions: two Triton kernels
    assert independent_nests(mean_then_scale) == 1  # the second reads the first: one kernel
    assert independent_nests(head + "}") == 1


def test_resnet_kernel_count_matches_the_h200_profiler() -> None:
    """inductor on a ResNet-34 (96², batch 1) read off the CPU schedule launches as many kernels
    as torch.profiler counted for its CUDA build on an H200 (105: 68 Triton, 37 cuDNN;
    benchmarks/results/gpu-h200/zoo-run1.csv). Before the CPU kernels' independent loop nests
    were split and eager's cuDNN layout transposes dropped: 125."""
    from ftmodel.tools.corpus import get_corpus_model
    zm = get_corpus_model("resnet34@96")
    torch.manual_seed(0)
    model = zm.build().eval()
    p = ftmodel.predict_latency(model, "inductor", "h200", 1, inputs=zm.make_inputs)
    assert p.n_launches == pytest.approx(105, rel=0.05)
