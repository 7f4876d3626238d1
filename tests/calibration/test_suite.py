"""The calibration suite on this machine (quick mode): a real profile, interruption-safe."""

from __future__ import annotations

import json
import statistics
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

import ftmodel.calibration.eager_stage as eager_stage
import ftmodel.calibration.framework_stage as framework_stage
import ftmodel.calibration.suite as suite
from ftmodel.calibration.allocator import (MAPPING, PROBE_THREADS, fresh_mapping, median_probe,
                                          mmap_threshold_stale, page_fault_probe_stale,
                                          probe_mmap_threshold, probe_page_fault_s)
from ftmodel.calibration.cache import EAGER_CONV_BATCH
from ftmodel.calibration.in_model_cpu import EXTRA_PASSES
from ftmodel.calibration.mkldnn_layout import LAYOUT_CURVES
from ftmodel.calibration.speed_probe import reference_drift
from ftmodel.calibration.update import kept_for_update
from ftmodel.api import predict_latency
from ftmodel.estimate.kernels import DeviceModel
from ftmodel.program import Kernel
from ftmodel.tracing.prepacked_variants import PREPACKED_VARIANTS
import numpy as np

from ftmodel.hardware.profile import HostProfile, OpClassData, read_profile
from ftmodel.heap import is_glibc
from ftmodel.measure import cpu_identity, heap_kept
from ftmodel.tools.zoo import mlp


try:
    import onnxruntime  # noqa: F401
    HAS_ORT = True
except ImportError:
    HAS_ORT = False

def _count_calls(monkeypatch: pytest.MonkeyPatch, module: Any, name: str) -> list[int]:
    """Wrap ``module.<name>`` so that each call appends to the returned list, then runs it."""
    calls: list[int] = []
    real = getattr(module, name)

    def counting(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, counting)
    return calls


@pytest.fixture(scope="module")
def quick_profile(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("cal") / "quick.json"
    fws = ("eager", "onnxruntime") if HAS_ORT else ("eager",)
    suite.calibrate("cpu", fws, path, quick=True, progress=False, threads=1)
    return path


def test_quick_calibration_writes_a_complete_valid_profile(quick_profile: Path) -> None:
    prof = read_profile(quick_profile)
    assert prof.kind == "calibrated"
    assert prof.provenance["complete"] is True
    assert prof.provenance["threads"] == 1
    assert prof.provenance["torch"] == torch.__version__
    for cls in ("gemm", "conv", "conv_grouped", "elementwise", "norm", "softmax", "reduction",
                "pool", "bmm", "attention", "embedding", "copy"):
        assert cls in prof.device.op_classes, cls
        assert all(row[3] > 0 for row in prof.device.op_classes[cls].samples)
        data = prof.device.op_classes[cls]
        # every sample timed again after a cache flush; cold is never faster than hot
        assert len(data.cold_s) == len(data.samples), cls
        assert all(c >= row[3] for c, row in zip(data.cold_s, data.samples)), cls
    # fused LSTM layers, per step: a step's MACs are 4 gates x (input + hidden) x hidden x batch
    lstm = prof.device.op_classes["gemm@mkldnn_rnn_layer"]
    assert {row[0] for row in lstm.samples} == {4.0 * 2 * h * h * b for h in (128, 512)
                                                 for b in (1, 16)}
    # the cache probe timed eager's oneDNN convolutions too, hot and in a chain
    probe = prof.provenance["cache_probe"]
    assert probe["conv_batch"] == EAGER_CONV_BATCH and probe["conv_layers"] >= 2
    assert probe["conv_hot_s"] > 0 and probe["conv_per_layer_s"] > 0
    eager = prof.host.frameworks["eager"]  # type: ignore[union-attr]
    assert eager.per_event_s["module_call"] >= 0
    assert any("program" in s for s in eager.samples)  # raw measurements kept
    assert {"host_scale", "device_scale", "per_byte_s", "per_kernel_s"} <= set(eager.in_model)
    # the machine's speed, probed around the stages: a positive time per probe, and the drift
    # is the spread of those times
    probes = prof.provenance["reference_probe"]
    assert [p["stage"] for p in probes[:3]] == ["start", "op sweeps", "eager in-model"]
    assert all(p["s"] > 0 for p in probes)
    times = [p["s"] for p in probes]
    assert prof.provenance["reference_drift"] == pytest.approx(max(times) / min(times) - 1,
                                                               abs=1e-4)
    # every measurement scaled to one speed: the nominal reference time and those seen
    speed = prof.provenance["speed"]
    assert speed["normalised"] is True and speed["reference_s"] > 0
    assert speed["references"] > 100 and 0 < speed["min_s"] <= speed["median_s"] <= speed["max_s"]
    # re-expressed at the machine's typical speed: the median of the references it took
    assert speed["reference_s"] == speed["median_s"] and speed["start_reference_s"] > 0


class _Recurrent(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lstm = nn.LSTM(32, 64, batch_first=True)
        self.head = nn.Linear(64, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.lstm(x)[0][:, -1])


def test_a_profile_at_another_speed_scales_every_prediction(quick_profile: Path,
                                                            monkeypatch: pytest.MonkeyPatch
                                                            ) -> None:
    from ftmodel.api import Predictor
    from ftmodel.hardware.rescale import at_speed
    import ftmodel.estimate.curves as curves
    import ftmodel.estimate.peaks as peaks

    # the two thresholds of timer resolution are absolute: a sample scaled across one changes
    # which samples set the physics floor or count as an inversion; without them, every
    # prediction is the original times the factor, to 5%: a sample's time net of its floor can
    # be zero or a nanosecond and is clamped to one nanosecond, and one quick calibration in a
    # clean clone came out 2% off (the absolute term behind it is not yet found); a time field
    # left unscaled (host costs, curves) moves these predictions by 60% or more
    monkeypatch.setattr(peaks, "FLOOR_SAMPLE_MIN_S", 0.0)
    monkeypatch.setattr(curves, "INVERSION_MIN_S", 0.0)

    prof = read_profile(quick_profile)
    # in proportion: every time field moves, whatever the exponent of the device side
    slow = at_speed(prof, 2.5 * prof.provenance["speed"]["reference_s"], device_exponent=1.0)
    assert slow.provenance["speed"]["start_reference_s"] == \
        prof.provenance["speed"]["start_reference_s"]
    assert {k: v for k, v in slow.device.cache.items() if k.endswith("cold_s_per_byte")} == \
        pytest.approx({k: 2.5 * v for k, v in prof.device.cache.items()
                       if k.endswith("cold_s_per_byte")})
    torch.manual_seed(0)
    cnn = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
                        nn.MaxPool2d(2), nn.Conv2d(16, 16, 3, groups=16), nn.AdaptiveAvgPool2d(1),
                        nn.Flatten(), nn.LayerNorm(16), nn.Linear(16, 10)).eval()
    cases: list[tuple[str, nn.Module, torch.Tensor]] = [
        ("eager", cnn, torch.randn(1, 3, 64, 64)),
        ("eager", _Recurrent().eval(), torch.randn(1, 24, 32)),
        ("eager", mlp(4, 64), torch.randn(1, 256))]
    if HAS_ORT:
        cases.append(("onnxruntime", cnn, torch.randn(1, 3, 64, 64)))
    for fw, model, x in cases:
        for heap in ("kept", "plain"):
            before = Predictor(fw, prof, heap=heap).predict(model, [1, 16], x)
            after = Predictor(fw, slow, heap=heap).predict(model, [1, 16], x)
            for a, b in zip(before, after):
                assert b.latency_s == pytest.approx(2.5 * a.latency_s, rel=5e-2), (fw, heap)
                assert b.overhead_s == pytest.approx(2.5 * a.overhead_s, rel=5e-2)
                # a kernel whose sample time net of its floor was clamped to 1 ns stays at
                # 1 ns: device time of a few such kernels (a quick profile's batch-1 MLP came
                # out at 5-12 ns, 2.0-2.1x) is that absolute term, not a time field left out
                if a.compute_s > 1e-7:
                    assert b.compute_s == pytest.approx(2.5 * a.compute_s, rel=5e-2)
    with pytest.raises(ValueError, match="must be positive"):
        at_speed(prof, 0.0)


def test_host_times_follow_the_host_reference_device_times_the_gemm(quick_profile: Path
                                                                    ) -> None:
    from ftmodel.hardware.rescale import at_speed

    prof = read_profile(quick_profile)
    speed = prof.provenance["speed"]
    assert speed["host_reference_s"] > 0 and speed["host_median_s"] > 0
    # device times move by the GEMM's factor to the power the calibration scaled them with
    e = speed["device_exponent"]
    assert e == 0.5
    out = at_speed(prof, 2.0 * speed["reference_s"], 3.0 * speed["host_reference_s"])
    assert out.provenance["speed"]["host_reference_s"] == pytest.approx(
        3.0 * speed["host_reference_s"])
    assert out.provenance["speed"]["start_host_reference_s"] == \
        speed.get("start_host_reference_s", speed["host_reference_s"])
    assert prof.host is not None and out.host is not None
    before, after = prof.host.frameworks["eager"], out.host.frameworks["eager"]
    for kind, cost in before.per_event_s.items():
        assert after.per_event_s[kind] == pytest.approx(3.0 * cost)
    assert after.in_model["per_kernel_s"] == pytest.approx(3.0 * before.in_model["per_kernel_s"])
    assert after.in_model["device_scale"] == before.in_model["device_scale"]
    assert out.host.page_fault_s == pytest.approx(3.0 * prof.host.page_fault_s)
    for name, data in prof.device.op_classes.items():
        assert [t for *_, t in out.device.op_classes[name].samples] == pytest.approx(
            [2.0 ** e * t for *_, t in data.samples]), name
    nets = [(a, b) for a, b in zip(before.samples, after.samples) if "network" in a]
    assert nets
    for a, b in nets:
        assert b["host_s"] == pytest.approx(3.0 * a["host_s"])
        assert b["device_s"] == pytest.approx(2.0 ** e * a["device_s"])
        assert 2.0 ** e * a["time_s"] <= b["time_s"] * (1 + 1e-9) \
            <= 3.0 * a["time_s"] * (1 + 1e-9)
    programs = [(a, b) for a, b in zip(before.samples, after.samples) if "program" in a]
    assert programs and all(b["time_s"] == pytest.approx(3.0 * a["time_s"])
                            for a, b in programs)


def test_device_curves_follow_their_blend_of_gemm_and_memory_references(quick_profile: Path
                                                                        ) -> None:
    from ftmodel.hardware.rescale import at_speed
    from ftmodel.speed import gemm_share

    prof = read_profile(quick_profile)
    speed = prof.provenance["speed"]
    assert speed["memory_normalised"] is True and speed["memory_reference_s"] > 0
    e = speed["device_exponent"]
    out = at_speed(prof, 2.0 * speed["reference_s"], None, 4.0 * speed["memory_reference_s"])
    assert out.provenance["speed"]["memory_reference_s"] == pytest.approx(
        4.0 * speed["memory_reference_s"])
    for name, data in prof.device.op_classes.items():
        w = gemm_share(name)
        assert [t for *_, t in out.device.op_classes[name].samples] == pytest.approx(
            [(2.0 * w + 4.0 * (1.0 - w)) ** e * t for *_, t in data.samples]), name
    # a profile whose device times were scaled by the GEMM alone stays on it
    old = replace(prof, provenance={**prof.provenance,
                                    "speed": {**speed, "memory_normalised": False}})
    out = at_speed(old, 2.0 * speed["reference_s"], None, 4.0 * speed["memory_reference_s"])
    for name, data in prof.device.op_classes.items():
        assert [t for *_, t in out.device.op_classes[name].samples] == pytest.approx(
            [2.0 ** e * t for *_, t in data.samples]), name
    # a profile calibrated before the exponent was recorded moves in proportion
    older = replace(prof, provenance={**prof.provenance, "speed": {
        k: v for k, v in speed.items() if k != "device_exponent"}})
    out = at_speed(older, 2.0 * speed["reference_s"], None, 4.0 * speed["memory_reference_s"])
    for name, data in prof.device.op_classes.items():
        w = gemm_share(name)
        assert [t for *_, t in out.device.op_classes[name].samples] == pytest.approx(
            [(2.0 * w + 4.0 * (1.0 - w)) * t for *_, t in data.samples]), name


def test_calibrated_profile_predicts_a_model(quick_profile: Path) -> None:
    p = predict_latency(mlp(4, 64), "eager", str(quick_profile), [1, 8],
                        inputs=torch.randn(1, 256))
    assert all(q.latency_s > 0 for q in p)
    assert p[1].compute_s >= p[0].compute_s  # more rows, more work


def test_interrupted_calibration_keeps_what_it_measured(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    calls = {"n": 0}
    real = eager_stage.measure_class

    def flaky(*args, **kwargs):  # type: ignore[no-untyped-def]
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(eager_stage, "measure_class", flaky)
    path = tmp_path / "partial.json"
    with pytest.raises(KeyboardInterrupt):
        suite.calibrate("cpu", ("eager",), path, quick=True, progress=False, threads=1)
    data = json.loads(path.read_text())
    assert data["provenance"]["complete"] is False
    assert len(data["device"]["op_classes"]) == 2  # the two classes measured before the stop
    assert "attention" in data["provenance"]["missing_op_classes"]
    assert read_profile(path).host is not None  # still a valid profile


@pytest.mark.requires_onnxruntime
@pytest.mark.skipif(not HAS_ORT, reason="needs onnxruntime")
def test_quick_calibration_fits_onnxruntime_host_costs(quick_profile: Path) -> None:
    prof = read_profile(quick_profile)
    assert prof.provenance["frameworks"] == ["eager", "onnxruntime"]
    assert "onnxruntime" in prof.provenance
    ort = prof.host.frameworks["onnxruntime"]  # type: ignore[union-attr]
    assert ort.per_call_s >= 0
    assert "module_call" not in ort.per_event_s  # ORT runs no nn.Module calls
    assert all(v >= 0 for v in ort.per_event_s.values())
    assert "kernel:gemm" in ort.per_event_s and "kernel:conv" in ort.per_event_s
    programs = [s for s in ort.samples if "program" in s]
    # each pattern at two lengths; counts are ORT's own (conv -> conv + NCHWc reorder copies)
    assert len(programs) >= 10 and all(s["time_s"] > 0 for s in programs)
    conv = next(s for s in programs if s["program"] == "conv_x3")
    assert conv["events"]["kernel:conv"] == 3  # 3 chained Conv2d, one ORT Conv node each
    assert {"host_scale", "device_scale", "per_byte_s", "per_kernel_s"} <= set(ort.in_model)
    assert "onnxruntime" in prof.provenance["framework_stage_s"]

    # its cache probe ran through ONNX Runtime's sessions: the chains' times less a session's
    # floor, a convolution chain too; its fit (when the chains slowed down) is ORT's own
    probe = prof.provenance["framework_cache_probes"]["onnxruntime"]
    assert probe["floor_s"] > 0 and probe["conv_layers"] >= 2
    assert all(t >= 0 for t in probe["per_layer_s"])
    own = {k.split("/", 1)[1] for k in prof.device.cache if k.startswith("onnxruntime/")}
    assert own <= {"lo_bytes", "hi_bytes", "stream_share", "cold_s_per_byte", "narrow_bytes",
                   "wide_bytes", "wide_ratio", "conv_ratio"}
    if own:
        assert prof.device.cache["onnxruntime/stream_share"] == prof.device.cache["stream_share"]
    # re-measuring ONNX Runtime into the profile starts from the shared model alone
    kept = kept_for_update(prof, ["onnxruntime"], {**prof.provenance, "date": "d"})
    assert not any(k.startswith("onnxruntime/") for k in kept.cache)
    assert kept.cache == {k: v for k, v in prof.device.cache.items() if "/" not in k}


@pytest.mark.requires_onnxruntime
@pytest.mark.skipif(not HAS_ORT, reason="needs onnxruntime")
def test_quick_calibration_measures_onnxruntime_curves(quick_profile: Path) -> None:
    """ONNX Runtime runs its own kernels: its op curves are measured through its runner and
    stored as ``onnxruntime/<curve>`` (hot only); the predictor for
    onnxruntime uses them, eager keeps the shared ones."""
    from ftmodel.estimate.kernels import DeviceModel

    prof = read_profile(quick_profile)
    classes = prof.device.op_classes
    for cls in ("gemm", "conv", "conv_grouped", "elementwise", "norm", "softmax", "pool"):
        data = classes[f"onnxruntime/{cls}"]
        assert len(data.samples) >= 3, cls
        assert all(row[3] > 0 for row in data.samples), cls
        assert not data.cold_s, cls  # hot only: ORT's threads sleep through a cache flush
    assert "onnxruntime/elementwise:inplace" not in classes  # no in-place ops in ONNX
    raw = prof.provenance["raw_op_times"]["onnxruntime/conv"]
    measured = [r for r in raw if "total_s" in r]
    assert measured and all(r["total_s"] > 0 and r["floor_s"] > 0 for r in measured)
    # the session's time, split by ORT's profiler: the reorders around a lone conv are other
    # nodes, and a one-node GEMM session is all GEMM
    assert all(r["node_share"] is not None and 0 < r["node_share"] <= 1 for r in measured)
    assert any(r["node_share"] < 1 for r in measured)
    # each share the median of three profiled sessions, recorded beside it
    assert all(len(r["node_shares"]) == 3 and
               r["node_share"] == pytest.approx(statistics.median(r["node_shares"]))
               for r in measured)
    gemm = [r for r in prof.provenance["raw_op_times"]["onnxruntime/gemm"] if "total_s" in r]
    assert gemm and all(r["node_share"] == pytest.approx(1.0) for r in gemm)
    # its LSTM samples make a per-step curve, as the shared one: one step's MACs each
    from ftmodel.calibration.ops import LSTM_SHORT_STEPS, LSTM_STEPS
    step = classes["onnxruntime/gemm@mkldnn_rnn_layer"]
    per_step = [4 * (h + h) * h * b for h in (128, 512) for b in (1, 16)]  # the quick grid
    assert LSTM_STEPS > LSTM_SHORT_STEPS > 1 and step.samples
    assert all(min(abs(row[0] / m - 1) for m in per_step) < 0.01 for row in step.samples)
    # ... and its GRU samples one of their own: 3 gates' weights a step
    gru = classes["onnxruntime/gemm@gru"]
    per_gru_step = [3 * (h + h) * h * b for h in (128, 512) for b in (1, 16)]
    assert gru.samples and all(min(abs(row[0] / m - 1) for m in per_gru_step) < 0.01
                               for row in gru.samples)
    conv = Kernel("conv", 10**7, 10**5, 10**5, "m", ("Conv",))
    assert DeviceModel(prof.device, "fp32", "onnxruntime")._key("conv", "", "Conv") == \
        "onnxruntime/conv"
    assert DeviceModel(prof.device)._key("conv", "", "aten.convolution.default") == "conv"
    t_ort, = DeviceModel(prof.device, "fp32", "onnxruntime").kernel_times_s([conv])
    assert t_ort > 0


def test_framework_sweeps_skip_what_a_framework_does_not_run_itself() -> None:
    from ftmodel.calibration.framework_ops import wanted

    assert wanted("onnxruntime", "conv") and wanted("onnxruntime", "elementwise@gelu")
    assert not wanted("onnxruntime", "elementwise:inplace")
    assert wanted("inductor", "softmax") and wanted("inductor", "elementwise")
    for extern in ("gemm", "bmm", "attention"):  # aten calls in inductor, as eager runs them
        assert not wanted("inductor", extern)
    # aten convolutions too, but on the channels-last tensors of inductor's layout choice
    assert wanted("inductor", "conv") and wanted("inductor", "conv_grouped")
    # aten kernels, the shared curves serve; its prepacked oneDNN convolutions and its linear
    # layers (matmul on weights transposed at freeze) excepted
    assert wanted("torchscript", "conv") and wanted("torchscript", "conv_grouped")
    assert wanted("torchscript", "gemm")
    assert not wanted("torchscript", "bmm") and not wanted("torchscript", "elementwise")
    assert not wanted("eager", "conv")  # the shared curves are eager's


@pytest.mark.requires_onnxruntime
@pytest.mark.skipif(not HAS_ORT, reason="needs onnxruntime")
def test_calibrated_profile_predicts_onnxruntime(quick_profile: Path) -> None:
    p = predict_latency(mlp(4, 64), "ort", str(quick_profile), [1, 8],
                        inputs=torch.randn(1, 256))
    assert all(q.latency_s > 0 for q in p)
    assert not any("counted as free" in w for q in p for w in q.warnings)


def test_compiled_host_programs_chain_their_ops() -> None:
    from ftmodel.calibration.dispatch import compiled_host_programs
    progs = compiled_host_programs((2, 5))
    names = [p.name for p in progs]
    assert "linear_x2" in names and "linear_x5" in names
    short = compiled_host_programs((2,), full=False)
    assert 0 < len(short) < len(progs) / 2
    for p in progs:  # every program runs, and every input's dim 0 agrees (the batch)
        with torch.no_grad():
            p.module(*p.inputs)
        assert len({t.shape[0] for t in p.inputs}) == 1


def test_calibrate_rejects_bad_arguments(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="cudagraphs"):
        suite.calibrate("cpu", ("cudagraphs",), tmp_path / "x.json", progress=False)
    with pytest.raises(ValueError, match="tpu"):
        suite.calibrate("tpu", ("eager",), tmp_path / "x.json", progress=False)


def ts_program_kernels() -> tuple[Any, ...]:
    """TorchScript's CPU kernels of a 2-d conv (prepacked by oneDNN) then a 1-d one."""
    from ftmodel.frameworks import torchscript as ts

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.c2 = nn.Conv2d(3, 8, 3, padding=1)
            self.c1 = nn.Conv1d(8, 8, 3, padding=1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.c1(self.c2(x).flatten(2))

    torch.manual_seed(0)
    x = torch.randn(1, 3, 8, 8)
    return ts.lower_model(Net().eval(), x, 1).kernels


def test_update_adds_a_framework_and_keeps_the_rest(quick_profile: Path, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "updated.json"
    path.write_bytes(quick_profile.read_bytes())
    before = read_profile(path)
    host_passes = _count_calls(monkeypatch, framework_stage, "time_framework_programs")
    after = suite.calibrate("cpu", ("torchscript",), path, quick=True, progress=False,
                            threads=1, update=True, passes=2)
    # the framework's host programs are timed once per pass, each keeping every pass's time
    assert len(host_passes) == 2
    programs = [s for s in after.host.frameworks["torchscript"].samples if "program" in s]
    assert programs and all(len(s["pass_time_s"]) == 2 for s in programs)
    # and its synthetic networks after each pass (more where the passes disagree: a busy
    # machine), the median of the passes fitted
    networks = [s for s in after.host.frameworks["torchscript"].samples if "network" in s]
    n_passes = len(networks[0]["pass_time_s"]) if networks else 0
    assert networks and 2 <= n_passes <= 2 + EXTRA_PASSES
    assert all(len(s["pass_time_s"]) == n_passes for s in networks)
    kept = after.provenance["in_model_passes"]["torchscript"]["kept"]
    assert all(s["time_s"] == statistics.median([s["pass_time_s"][i] for i in kept])
               for s in networks)
    assert read_profile(path) == after
    assert after.host.frameworks["eager"] == before.host.frameworks["eager"]
    # the shared curves are kept; torchscript adds its prepacked convolutions' own, keyed by
    # that op so that its other conv nodes (aten::conv1d) keep the shared ones
    # (and, where samples on and off oneDNN's channel block number 3 or more, those of each),
    # its linear layers' (aten::matmul on the weights transposed at freeze, not other GEMMs)
    # and the curves of its oneDNN-layout reorders and of ReLU on blocked tensors
    new = set(after.device.op_classes) - set(before.device.op_classes)
    layout = {f"torchscript/{c}" for c in LAYOUT_CURVES}
    assert layout <= new
    assert {k.split(":")[0] for k in new - layout} == {
        "torchscript/conv@mkldnn_convolution", "torchscript/conv_grouped@mkldnn_convolution",
        "torchscript/gemm@matmul"}
    assert {k.split(":", 1)[1] for k in new - layout if ":" in k} <= PREPACKED_VARIANTS
    # a reorder of the smallest size costs oneDNN's per-call work: more than a dense copy of
    # the same bytes on the shared curve (which holds the data movement only)
    for curve in ("copy@to_mkldnn", "copy@to_dense"):
        smallest = min(after.device.op_classes[f"torchscript/{curve}"].samples)
        shared = DeviceModel(after.device).kernel_times_s(
            [Kernel("copy", 0, int(smallest[1]), int(smallest[2]), "", ("aten::clone",))])[0]
        assert smallest[3] > shared
    assert all(after.device.op_classes[k] == v for k, v in before.device.op_classes.items())
    ts_conv = [k for k in ts_program_kernels() if k.op_class == "conv"]
    model = DeviceModel(after.device, "fp32", "torchscript")
    keys = [model._key(k.op_class, k.variant, k.members[0]) for k in ts_conv]
    # the 2-d conv runs prepacked in oneDNN; the 1-d one as eager runs it, on eager's curves
    assert keys[0] in ("torchscript/conv@mkldnn_convolution",
                       f"torchscript/conv@mkldnn_convolution:{ts_conv[0].variant}")
    assert keys[1] == DeviceModel(after.device)._key("conv", ts_conv[1].variant, "")
    assert after.device.cache == before.device.cache
    ts = after.host.frameworks["torchscript"]
    assert ts.per_event_s and ts.in_model
    assert after.provenance["complete"] is True
    assert after.provenance["updates"][-1]["frameworks"] == ["torchscript"]
    assert "torchscript" in after.provenance["frameworks"]
    assert after.provenance["date"] == before.provenance["date"]  # the original calibration's
    # the new stages are measured at the speed the profile's first ones were scaled to
    assert after.provenance["speed"]["reference_s"] == before.provenance["speed"]["reference_s"]


def test_page_fault_probe_maps_private_memory_and_update_re_measures_a_shared_one(
        quick_profile: Path, tmp_path: Path) -> None:
    maps = Path("/proc/self/maps")
    if not maps.exists():
        pytest.skip("needs Linux's /proc/self/maps")
    m = fresh_mapping(1 << 20)
    addr = torch.frombuffer(m, dtype=torch.uint8).data_ptr()
    perms = [line.split()[1] for line in maps.read_text().splitlines()
             if int(line.split("-")[0], 16) <= addr < int(line.split()[0].split("-")[1], 16)]
    m.close()
    assert perms == ["rw-p"]  # private, as malloc maps; "rw-s" is shared memory (tmpfs)
    assert read_profile(quick_profile).provenance["page_fault_probe"]["mapping"] == MAPPING
    data = json.loads(quick_profile.read_text())
    del data["provenance"]["page_fault_probe"]["mapping"]  # as profiles probed on shared pages
    data["host"]["page_fault_s"] = data["provenance"]["page_fault_probe"]["page_fault_s"] = 1.0
    path = tmp_path / "shared-probe.json"
    path.write_text(json.dumps(data))
    after = suite.calibrate("cpu", ("eager",), path, quick=True, progress=False, threads=1,
                            update=True)  # nothing else to update: the price alone
    assert after.host is not None and 0.0 < after.host.page_fault_s < 1.0
    assert after.host.frameworks == read_profile(quick_profile).host.frameworks
    assert after.provenance["page_fault_probe"]["mapping"] == MAPPING
    assert not page_fault_probe_stale(after.host, after.provenance)


GLIBC = is_glibc()


@pytest.mark.skipif(not GLIBC, reason="glibc's malloc only")
def test_mmap_threshold_probe_finds_where_a_fresh_process_maps_blocks(quick_profile: Path
                                                                       ) -> None:
    probe = probe_mmap_threshold()
    assert probe is not None
    chunk, request = probe["mmap_threshold_bytes"], probe["smallest_mapped_request_bytes"]
    assert 128 * 1024 <= chunk <= 32 << 20 and chunk % 16 == 0  # glibc's range, a chunk size
    assert request < chunk <= request + 24  # the request, its 8-byte header, rounded up to 16
    prof = read_profile(quick_profile)  # a calibration records it where predictions read it
    assert prof.host is not None and prof.host.mmap_threshold_bytes == chunk
    assert not mmap_threshold_stale(prof.host)


@pytest.mark.skipif(not GLIBC, reason="glibc's malloc only")
def test_update_adds_the_mmap_threshold_without_re_measuring_the_fault_price(
        quick_profile: Path, tmp_path: Path) -> None:
    data = json.loads(quick_profile.read_text())
    del data["host"]["mmap_threshold_bytes"]  # as profiles calibrated before it was measured
    path = tmp_path / "no-threshold.json"
    path.write_text(json.dumps(data))
    before = read_profile(path)
    assert mmap_threshold_stale(before.host)
    after = suite.calibrate("cpu", ("eager",), path, quick=True, progress=False, threads=1,
                            update=True)
    assert after.host is not None and before.host is not None
    assert after.host.mmap_threshold_bytes >= 128 * 1024
    assert after.host.page_fault_s == before.host.page_fault_s
    assert after.host.frameworks == before.host.frameworks
    assert after.provenance["mmap_threshold_probe"]["after"] == "import torch"


def test_page_fault_probe_runs_its_op_on_one_thread_and_puts_the_count_back() -> None:
    old = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        probe = probe_page_fault_s(rounds=1, round_s=0.005)
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(old)
    assert probe["threads"] == PROBE_THREADS == 1
    host = HostProfile("h", "cpu", 2, {}, page_fault_s=probe["page_fault_s"] or 1e-6)
    assert not page_fault_probe_stale(host, {"page_fault_probe": probe})
    # a profile whose probe ran on the calibration's threads prices a fault in a model low
    assert page_fault_probe_stale(host, {"page_fault_probe": {**probe, "threads": 2}})
    assert page_fault_probe_stale(host, {"page_fault_probe": {
        k: v for k, v in probe.items() if k != "threads"}})


def test_page_fault_probe_is_timed_as_host_work(monkeypatch: pytest.MonkeyPatch) -> None:
    """Under a speed meter the probe's rounds follow the host reference, which the profile's
    price is re-expressed by (``ftmodel.hardware.rescale.at_speed``), not the GEMM's."""
    import ftmodel.calibration.allocator as allocator

    seen: list[object] = []
    real = allocator.measure_interleaved

    def spy(fns: Any, **kw: Any) -> Any:
        seen.append(kw.get("host_share"))
        return real(fns, **kw)

    monkeypatch.setattr(allocator, "measure_interleaved", spy)
    probe_page_fault_s(rounds=1, round_s=0.005)
    (share,) = seen
    assert isinstance(share, dict) and len(share) >= 2 and set(share.values()) == {1.0}


def test_page_fault_price_is_the_median_probe_of_the_calibration() -> None:
    probes = [{"page_fault_s": s, "samples": [s]} for s in (1.0e-6, 5.9e-6, 1.2e-6, 1.1e-6)]
    got = median_probe(probes)
    assert got["page_fault_s"] == 1.1e-6 and got["samples"] == [1.1e-6]  # one slow probe ignored
    assert got["per_probe_s"] == [1.0e-6, 5.9e-6, 1.2e-6, 1.1e-6]
    assert median_probe(probes[:3])["page_fault_s"] == 1.2e-6
    with pytest.raises(ValueError, match="at least one"):
        median_probe([])


def test_calibration_probes_page_faults_before_the_sweeps_and_after_each_pass(
        quick_profile: Path) -> None:
    prof = read_profile(quick_profile)
    probe = prof.provenance["page_fault_probe"]
    assert len(probe["per_probe_s"]) == 1 + prof.provenance["settings"]["passes"]
    assert probe["page_fault_s"] == sorted(probe["per_probe_s"])[
        (len(probe["per_probe_s"]) - 1) // 2]
    assert prof.host is not None and prof.host.page_fault_s > 0.0


def test_update_refuses_a_missing_or_foreign_profile(quick_profile: Path, tmp_path: Path
                                                     ) -> None:
    with pytest.raises(ValueError, match="existing profile.*without --update"):
        suite.calibrate("cpu", ("torchscript",), tmp_path / "none.json", quick=True,
                        progress=False, threads=1, update=True)
    path = tmp_path / "copy.json"
    path.write_bytes(quick_profile.read_bytes())
    with pytest.raises(ValueError, match="none was named.*--frameworks inductor"):
        suite.calibrate("cpu", ("eager",), path, quick=True, progress=False, threads=1,
                        update=True)
    old = torch.get_num_threads()
    try:
        with pytest.raises(ValueError, match="measured with 1 threads, not 2.*--threads 1"):
            suite.calibrate("cpu", ("torchscript",), path, quick=True, progress=False,
                            threads=2, update=True)
    finally:
        torch.set_num_threads(old)
    assert path.read_bytes() == quick_profile.read_bytes()  # left as it was


def test_update_refuses_a_profile_measured_with_another_allocator_setting(
        quick_profile: Path, tmp_path: Path) -> None:
    if not heap_kept():
        pytest.skip("the quick profile was not measured with the heap kept (not glibc)")
    assert read_profile(quick_profile).provenance["allocator"] == "heap kept"
    data = json.loads(quick_profile.read_text())
    del data["provenance"]["allocator"]  # as profiles from before the setting was recorded
    path = tmp_path / "old.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match="allocator setting 'default'.*--default-malloc"):
        suite.calibrate("cpu", ("torchscript",), path, quick=True, progress=False, threads=1,
                        update=True)


def test_update_refuses_a_profile_of_another_cpu_under_the_same_name(
        quick_profile: Path, tmp_path: Path) -> None:
    """A VM's CPU name ("AMD EPYC") has covered two machines 1.7x apart in speed: where the
    profile records the CPU's identity, an update on another one is refused; a profile from
    before the identity was recorded is not checked on it."""
    data = json.loads(quick_profile.read_text())
    here = cpu_identity()
    if not here:
        pytest.skip("this platform's /proc/cpuinfo gives no CPU identity")
    assert data["provenance"]["cpu_identity"] == here
    data["provenance"]["cpu_identity"] = {**here, "model": here.get("model", "") + "9"}
    path = tmp_path / "other.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match="its CPU is .*model .*another machine"):
        suite.calibrate("cpu", ("torchscript",), path, quick=True, progress=False, threads=1,
                        update=True)
    assert json.loads(path.read_text()) == data  # left as it was
    from ftmodel.calibration.update import profile_to_update

    del data["provenance"]["cpu_identity"]  # as profiles from before it was recorded
    path.write_text(json.dumps(data))
    prof = read_profile(path)
    assert profile_to_update(path, "cpu", prof.host.threads, prof.host.cpu,
                             prof.provenance.get("allocator", "default"), here) == prof


@pytest.mark.requires_cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_calibration_is_async(tmp_path: Path) -> None:
    prof = suite.calibrate("cuda", ("eager",), tmp_path / "gpu.json", quick=True, progress=False)
    assert prof.device.execution == "async"


def test_reference_drift_is_the_spread_of_the_probes() -> None:
    assert reference_drift([]) == 0.0
    assert reference_drift([{"stage": "start", "s": 1e-3}]) == 0.0
    probes = [{"stage": "start", "s": 3.0e-3}, {"stage": "op sweeps", "s": 3.6e-3},
              {"stage": "eager in-model", "s": 3.3e-3}]
    assert reference_drift(probes) == pytest.approx(0.2)


def test_per_plane_curve_keeps_what_planes_add_beyond_the_curve() -> None:
    from ftmodel.calibration.planes import per_plane_curve
    from ftmodel.estimate.curves import SampleCurve
    curve = OpClassData("samples", tuple((0.0, b, b, 1e-6 + 2 * b / 4e9)
                                         for b in (1e3, 1e4, 1e5, 1e6, 1e7)))
    fitted = SampleCurve.fit("norm", curve)
    planes = [256, 4096, 65536]
    rows = []
    for p, b in zip(planes, (1e4, 1e5, 1e6)):
        base = float(fitted(np.array([0.0]), np.array([b]), np.array([b]))[0])
        rows.append((0.0, b, b, base + 4e-9 * p))
    got = per_plane_curve(curve, OpClassData("samples", tuple(rows)), planes)
    assert got is not None
    assert [r[1] for r in got.samples] == planes
    np.testing.assert_allclose([r[3] for r in got.samples], [4e-9 * p for p in planes],
                               rtol=1e-3)
    # a sample faster than the curve adds nothing (kept at 1 ns); too few samples give none
    faster = OpClassData("samples", tuple((0.0, b, b, 1e-9) for _, b, _, _ in rows))
    assert all(r[3] == 1e-9 for r in per_plane_curve(curve, faster, planes).samples)
    assert per_plane_curve(curve, OpClassData("samples", tuple(rows[:2])), planes[:2]) is None
    # planes of several sizes at one count: the median excess
    three = [rows[0], (0.0, 2e4, 2e4, rows[0][3]), (0.0, 3e4, 3e4, rows[0][3])] + rows[1:]
    got = per_plane_curve(curve, OpClassData("samples", tuple(three)), [256] * 3 + planes[1:])
    assert got is not None and [r[1] for r in got.samples] == planes


def test_plane_samples_span_many_small_planes() -> None:
    from ftmodel.calibration.planes import PLANES_SWEEP, plane_count, plane_samples
    samples = plane_samples(quick=True)
    assert samples[0].is_floor and all(s.curve == PLANES_SWEEP for s in samples)
    counts = [plane_count(s) for s in samples if not s.is_floor]
    assert min(counts) == 256 and max(counts) == 65536
    assert all(s.inputs[0].shape[-1] <= 7 for s in samples)


def test_each_sample_keeps_its_median_over_the_passes() -> None:
    from ftmodel.calibration.ops import OpSample
    from ftmodel.calibration.sweep_stage import ClassTimes, class_curves

    floor = OpSample("gemm", "linear", "floor", nn.Linear(4, 4), (torch.randn(1, 4),),
                     is_floor=True)
    big = OpSample("gemm", "linear", "big", nn.Linear(256, 256), (torch.randn(64, 256),))
    passes = [ClassTimes({"floor": (1e-5, 0.1), "big": (t, s)}, {"floor": 2e-5, "big": c})
              for t, s, c in ((1.0e-3, 0.1, 2e-3), (5.0e-3, 0.9, 9e-3), (1.2e-3, 0.2, 3e-3))]
    data, raw, _ = class_curves([floor, big], passes, "cpu")
    # the slow second pass is outvoted: median total, its spread, and the median cold time
    assert raw[0]["total_s"] == pytest.approx(1.2e-3) and raw[0]["spread"] == pytest.approx(0.2)
    assert raw[0]["pass_total_s"] == [1.0e-3, 5.0e-3, 1.2e-3]
    assert data.samples[0][3] == pytest.approx(1.2e-3 - 1e-5)
    assert data.cold_s[0] == pytest.approx(3e-3 - 2e-5)
    one, raw_one, _ = class_curves([floor, big], passes[:1], "cpu")
    assert one.samples[0][3] == pytest.approx(1.0e-3 - 1e-5) and "pass_total_s" not in raw_one[0]


def test_each_sample_keeps_what_its_passes_were_made_from_unscaled() -> None:
    from ftmodel.calibration.ops import OpSample
    from ftmodel.calibration.sweep_stage import ClassTimes, as_timed, class_curves
    from ftmodel.measure import Measurement
    from ftmodel.speed import Reference

    slow, fast = Reference(3e-3, 2e-4, 2e-3), Reference(1.5e-3, 1e-4, None)
    m = Measurement(1.0, (1.0, 2.0), 10, timed_round_s=(4.0e-3, 3.123456e-3),
                    references=((slow, fast), (slow, slow)))
    # fastest round as timed, then the fastest GEMM, memory and host references around them
    assert as_timed(m) == (3.123e-3, 1.5e-3, 2e-3, 1e-4)
    assert as_timed(Measurement(1.0, (1.0,), 1)) == ()  # no meter: nothing to record

    floor = OpSample("gemm", "linear", "floor", nn.Linear(4, 4), (torch.randn(1, 4),),
                     is_floor=True)
    big = OpSample("gemm", "linear", "big", nn.Linear(256, 256), (torch.randn(64, 256),))
    timed = {"floor": (1e-5, 2e-3, 2e-3, 1e-4), "big": (1e-3, 2e-3, 2e-3, 1e-4)}
    passes = [ClassTimes({"floor": (1e-5, 0.1), "big": (1e-3, 0.1)}, {}, timed)
              for _ in range(2)]
    _, raw, _ = class_curves([floor, big], passes, "cpu")
    assert raw[0]["pass_timed"] == [list(timed["big"])] * 2
    assert raw[0]["pass_floor_timed"] == [list(timed["floor"])] * 2
    assert "pass_short_timed" not in raw[0]
    # a pass without the record (no meter in force): none kept, rather than a partial one
    _, raw, _ = class_curves([floor, big], [passes[0], ClassTimes(passes[0].hot, {})], "cpu")
    assert "pass_timed" not in raw[0] and "pass_floor_timed" not in raw[0]


@pytest.mark.parametrize("passes", [0, -1, 1.5, True])
def test_calibrate_rejects_a_bad_number_of_passes(tmp_path: Path, passes: Any) -> None:
    from ftmodel.errors import InvalidArgumentError
    with pytest.raises(InvalidArgumentError, match="passes must be a whole number"):
        suite.calibrate("cpu", ("eager",), tmp_path / "x.json", progress=False, passes=passes)
    assert not (tmp_path / "x.json").exists()


def test_in_model_networks_measured_in_several_passes_keep_the_median_of_the_fitted_ones(
        quick_profile: Path) -> None:
    """The in-model stage's networks are built once and measured once per pass; each network's
    time is the median of its passes' (eager's) or of the passes that agree with the fastest
    (another framework's), and every pass's time is kept."""
    from dataclasses import replace

    from ftmodel.calibration.in_model_cpu import (fit_in_model_stage, in_model_networks,
                                                  kept_passes, measure_in_model)

    prof = read_profile(quick_profile)
    fh = prof.host.frameworks["eager"]
    nets = in_model_networks(prof, "cpu", quick=True)
    assert len(nets.programs) == len(nets.fns) == 12  # 6 networks at batch 1 and 8
    one = measure_in_model(nets, prof, "cpu", rounds=2)
    assert set(one) == set(nets.programs) and all(t > 0 for t in one.values())
    bare = replace(fh, samples=(), in_model={})
    factors = (1.0, 3.0, 1.2)
    passes = [{k: t * f for k, t in one.items()} for f in factors]
    for kept, expected in ((None, 1.2),  # every pass: the median, not the slow pass
                           (kept_passes(passes), 1.0)):  # those that agree: the first alone
        fitted = fit_in_model_stage(prof, bare, nets, passes, kept)
        rows = {s["network"]: s for s in fitted.samples}
        for (net, b), t in one.items():
            row = rows[f"{net}@b{b}"]
            assert row["pass_time_s"] == [t * f for f in factors]
            assert row["time_s"] == pytest.approx(expected * t)
        assert fitted.in_model["cv_median_ape"] >= 0.0
    once = fit_in_model_stage(prof, bare, nets, passes[:1])
    assert all("pass_time_s" not in s for s in once.samples)


def test_in_model_terms_are_fitted_against_the_curves_the_profile_is_written_with(
        quick_profile: Path) -> None:
    """A calibration re-expresses its profile at the machine's typical speed after the in-model
    fit, moving memory-bound curves by the memory reference; the terms are fitted again against
    the curves as written, from the networks' recorded times."""
    from ftmodel.api import Predictor
    from ftmodel.calibration.in_model_cpu import in_model_networks, refit_in_model
    from ftmodel.hardware.rescale import at_speed

    prof = read_profile(quick_profile)
    fh = prof.host.frameworks["eager"]
    torch.set_num_threads(prof.host.threads + 1)  # another count than the calibration's
    nets = in_model_networks(prof, "cpu", quick=True)
    # the calibration already did it: fitting again changes nothing (the file's rounding aside;
    # the networks' 1x1 convolutions traced with the backends of the profile's thread count)
    again = refit_in_model(prof, nets)
    assert dict(again.in_model) == pytest.approx(dict(fh.in_model), rel=0.01)
    speed = prof.provenance["speed"]
    moved = at_speed(prof, speed["reference_s"], speed["host_reference_s"],
                     3.0 * speed["memory_reference_s"])  # memory-bound curves up, GEMMs not
    stale = {s["network"]: s for s in moved.host.frameworks["eager"].samples
             if "network" in s}
    refit = refit_in_model(moved, nets)
    rows = {s["network"]: s for s in refit.samples if "network" in s}
    assert set(rows) == set(stale) == {f"{n}@b{b}" for n, b in nets.programs}
    bare = replace(moved, host=replace(moved.host, frameworks={
        **moved.host.frameworks, "eager": replace(fh, in_model={})}))
    heap = "kept" if prof.provenance["allocator"] == "heap kept" else "plain"
    predictor = Predictor("eager", bare, heap=heap)
    grew = 0
    for (net, b), prog in nets.programs.items():
        row = rows[f"{net}@b{b}"]
        assert row["device_s"] == pytest.approx(predictor.program_timeline(prog).compute_s)
        assert row["time_s"] == stale[f"{net}@b{b}"]["time_s"]  # the measurement is kept
        grew += row["device_s"] > 1.05 * stale[f"{net}@b{b}"]["device_s"]
    assert grew > 0  # the recorded predictions were stale for some network
    assert [s for s in refit.samples if "network" not in s] == [
        s for s in fh.samples if "network" not in s]
    other = replace(nets, programs={("no-such-net", 1): next(iter(nets.programs.values()))})
    with pytest.raises(ValueError, match="records no time"):
        refit_in_model(prof, other)


def test_host_programs_timed_in_several_passes_keep_each_ones_median() -> None:
    """Eager's host programs are timed before the sweeps and between their passes; each
    program's time is the median of its passes' (a pass on a slow host outvoted), the event
    costs are fitted to those medians, and every pass's time is kept."""
    from ftmodel.calibration.dispatch import fit_event_costs, fit_host_passes, host_programs

    programs = host_programs()[:6]
    counts = [{"module_call": 1, "kernel:elementwise": 10 * (i + 1)} for i in range(6)]
    base = {p.name: (1e-6 + 1e-6 * 10 * (i + 1), 0.1) for i, p in enumerate(programs)}
    slow = {k: (t * 3.0, s) for k, (t, s) in base.items()}
    fitted = fit_host_passes(programs, counts, [base, slow, base])
    rows = {s["program"]: s for s in fitted.samples}
    for p in programs:
        assert rows[p.name]["pass_time_s"] == [base[p.name][0], slow[p.name][0],
                                               base[p.name][0]]
        assert rows[p.name]["time_s"] == pytest.approx(base[p.name][0])
    assert fitted.per_event_s == pytest.approx(
        fit_event_costs(counts, [base[p.name][0] for p in programs]))
    assert fitted.per_event_s["kernel:elementwise"] == pytest.approx(1e-6, rel=1e-3)
    once = fit_host_passes(programs, counts, [slow])
    assert all("pass_time_s" not in s for s in once.samples)
    assert once.per_event_s["kernel:elementwise"] == pytest.approx(3e-6, rel=1e-3)
    with pytest.raises(ValueError, match="no host passes"):
        fit_host_passes(programs, counts, [])


def test_compiled_framework_programs_timed_in_several_passes_keep_each_ones_median() -> None:
    """A compiled framework's host programs, timed in several passes, keep each program's median
    time (a pass on a slow host outvoted) and fit the per-event and per-call costs to those."""
    from ftmodel.calibration.framework_host import (FrameworkPrograms, fit_framework_costs,
                                                    fit_framework_passes)

    names = [f"chain{n}" for n in (2, 4, 8, 16)]
    events = {n: {"kernel:elementwise": int(n[5:])} for n in names}
    built = FrameworkPrograms("torchscript", "cpu", {n: lambda: None for n in names}, events,
                              {n: 0.5 for n in names})
    base = {n: (20e-6 + 2e-6 * int(n[5:]), 0.05) for n in names}
    slow = {n: (t * 2.5, s) for n, (t, s) in base.items()}
    fitted = fit_framework_passes(built, [slow, base, base])
    assert fitted.per_event_s["kernel:elementwise"] == pytest.approx(2e-6, rel=1e-3)
    assert fitted.per_call_s == pytest.approx(20e-6, rel=1e-3)
    per_event, per_call = fit_framework_costs(
        "torchscript", "cpu", [events[n] for n in names], [base[n][0] for n in names])
    assert fitted.per_event_s == pytest.approx(per_event)
    assert fitted.per_call_s == pytest.approx(per_call)
    rows = {s["program"]: s for s in fitted.samples}
    assert all(rows[n]["pass_time_s"] == [slow[n][0], base[n][0], base[n][0]] for n in names)
    assert all(rows[n]["build_s"] == 0.5 for n in names)
    once = fit_framework_passes(built, [slow])
    assert all("pass_time_s" not in s for s in once.samples)
    assert once.per_call_s == pytest.approx(50e-6, rel=1e-3)
    with pytest.raises(ValueError, match="no host passes"):
        fit_framework_passes(built, [])


def test_calibration_times_its_host_programs_once_per_pass(tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch
                                                           ) -> None:
    """A calibration of several passes times the host programs before the sweeps and between
    every two passes: as many times as it has passes."""
    calls = _count_calls(monkeypatch, eager_stage, "time_host_programs")
    monkeypatch.setattr(eager_stage, "OP_SWEEP_CLASSES", ("gemm", "elementwise"))
    monkeypatch.setattr(suite, "plane_samples", lambda quick: [])
    prof = suite.calibrate("cpu", ("eager",), tmp_path / "p.json", quick=True, progress=False,
                           threads=1, passes=2, cold=False)
    assert len(calls) == 2
    samples = [s for s in prof.host.frameworks["eager"].samples if "program" in s]
    assert samples and all(len(s["pass_time_s"]) == 2 for s in samples)


def test_pools_get_per_window_curves_read_at_the_bytes_their_windows_read(
        quick_profile: Path) -> None:
    from ftmodel.calibration.windows import window_samples
    from ftmodel.frameworks import eager
    from ftmodel.tracing.dispatch import trace
    classes = read_profile(quick_profile).device.op_classes
    samples = [s for s in window_samples(quick=True) if not s.is_floor]
    for op, kind in (("max_pool2d_with_indices", "max_pool"), ("avg_pool2d", "avg_pool")):
        curve = classes[f"pool@{op}:windows"]
        ours = [s for s in samples if s.family.startswith(kind)]
        assert len(curve.samples) == len(ours) and len(curve.cold_s) == len(ours)
        for s, row in zip(ours, curve.samples):
            pool = next(k for k in eager.lower(trace(s.module, s.inputs)).kernels
                        if k.op_class == "pool")
            # the bytes-read axis holds the windows' reads, more than the input at stride 1
            assert row[1] == pool.bytes_window_reads and row[2] == pool.bytes_written
            assert row[3] > 0
    assert not any(n.endswith(":windows") and not n.startswith("pool@") for n in classes)


def test_update_adds_the_per_window_curves_a_profile_lacks(quick_profile: Path,
                                                           tmp_path: Path) -> None:
    from ftmodel.calibration.windows import windows_stale
    data = json.loads(quick_profile.read_text())
    for name in [n for n in data["device"]["op_classes"] if n.endswith(":windows")]:
        del data["device"]["op_classes"][name]  # as profiles calibrated before the stage
    path = tmp_path / "no-windows.json"
    path.write_text(json.dumps(data))
    before = read_profile(path)
    assert windows_stale(before.device)
    after = suite.calibrate("cpu", ("eager",), path, quick=True, progress=False, threads=1,
                            update=True)
    assert not windows_stale(after.device)
    added = set(after.device.op_classes) - set(before.device.op_classes)
    assert added == {"pool@avg_pool2d:windows", "pool@max_pool2d_with_indices:windows"}
    for name, data_before in before.device.op_classes.items():
        assert after.device.op_classes[name] == data_before  # the rest is kept
    assert after.host is not None and before.host is not None
    assert after.host.frameworks == before.host.frameworks
