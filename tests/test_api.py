"""ftmodel.api.predict_latency on a synthetic calibrated CPU profile: totals, breakdown, errors."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

import ftmodel
from ftmodel.api import Prediction, crossover_batch, predict_latency
from ftmodel.errors import InvalidArgumentError, ProfileError, UnknownNameError
from ftmodel.frameworks.base import canonical_framework
from ftmodel.hardware.profile import FrameworkHost, HardwareProfile, write_profile

IN, HID, OUT = 16, 32, 8


def _mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(IN, HID), nn.ReLU(), nn.Linear(HID, OUT))


@pytest.fixture(scope="module")
def mlp() -> nn.Module:
    return _mlp()


@pytest.fixture(scope="module")
def pred(mlp: nn.Module, tiny_profile: HardwareProfile) -> Prediction:
    return predict_latency(mlp, "eager", tiny_profile, 1, inputs=torch.randn(1, IN))


def test_prediction_basics(pred: Prediction, tiny_profile: HardwareProfile) -> None:
    assert isinstance(pred, Prediction)
    assert pred.framework == "eager"
    assert pred.device == tiny_profile.name
    assert pred.batch == 1 and pred.dtype == "fp32"
    assert pred.latency_s > 0 and pred.overhead_s > 0 and pred.compute_s > 0
    # sync CPU: host and compute share the thread
    assert pred.latency_s == pytest.approx(pred.overhead_s + pred.compute_s, rel=1e-12)
    assert pred.closed_form_s == pytest.approx(max(pred.overhead_s, pred.compute_s))
    assert pred.regime in {"framework-bound", "compute-bound"}
    assert 0.0 <= pred.framework_tax <= 1.0
    assert pred.framework_tax == pytest.approx(1 - pred.compute_s / pred.latency_s)
    assert pred.latency_ms == pytest.approx(pred.latency_s * 1e3)
    assert set(pred.as_dict()) >= {"latency_s", "overhead_s", "compute_s", "regime",
                                   "framework_tax", "n_launches", "macs", "crossover_batch"}


def test_launches_and_macs(pred: Prediction) -> None:
    # eager: Linear = aten.t (view, no launch) + aten.addmm (1 launch); ReLU = aten.relu (1)
    # n_launches = 2 Linear × 1 + 1 ReLU × 1 = 3
    assert pred.n_launches == 2 * 1 + 1 * 1
    # macs at batch 1 = 1·16·32 + 1·32·8 = 768
    assert pred.macs == 1 * IN * HID + 1 * HID * OUT


def test_overhead_matches_host_profile(pred: Prediction, tiny_profile: HardwareProfile) -> None:
    assert tiny_profile.host is not None
    host = tiny_profile.host.frameworks["eager"]
    per = host.per_event_s
    # per_call + 3 kernels (2 gemm, 1 elementwise) + 4 module calls (Sequential + 3 children)
    #          + 2 views (aten.t of each Linear) + 0 allocs
    expected = (host.per_call_s + 2 * per["kernel:gemm"] + per["kernel:elementwise"]
                + 4 * per["module_call"] + 2 * per["view"])
    assert pred.overhead_s == pytest.approx(expected, rel=1e-9)


def test_layers_sum_to_totals(pred: Prediction, tiny_profile: HardwareProfile) -> None:
    assert tiny_profile.host is not None
    per_call = tiny_profile.host.frameworks["eager"].per_call_s
    layers = pred.layers
    assert [lc.module_path for lc in layers] == ["0", "1", "2"]
    assert sum(lc.n_launches for lc in layers) == pred.n_launches
    assert sum(lc.macs for lc in layers) == pred.macs
    assert sum(lc.device_s for lc in layers) == pytest.approx(pred.compute_s, rel=1e-12)
    # the per-forward-call cost belongs to no layer
    assert sum(lc.host_s for lc in layers) + per_call == pytest.approx(pred.overhead_s,
                                                                       rel=1e-12)
    assert [lc.macs for lc in layers] == [IN * HID, 0, HID * OUT]


class _TwoOps(nn.Module):
    """Two kernels at one module path: y = relu(x) + x."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x) + x


def test_layers_sum_a_paths_kernels_in_order(tiny_profile: HardwareProfile) -> None:
    """Each layer's seconds are ``0.0 + o_1 + o_2 ...`` in kernel order, whether its path has
    one kernel or several (the breakdown must equal the plain loop's to the bit)."""
    model = nn.Sequential(nn.Linear(IN, HID), _TwoOps(), nn.Linear(HID, OUT)).eval()
    got = predict_latency(model, "eager", tiny_profile, 2, inputs=torch.randn(1, IN))
    from ftmodel.api import Predictor
    pred = Predictor("eager", tiny_profile)
    program = pred.lower(model, torch.randn(2, IN), 2, pred.trace(model, torch.randn(2, IN), 2))
    tl = pred.program_timeline(program)
    want: dict[str, list[Any]] = {}
    for k, o, d in zip(program.kernels, tl.host_s.tolist(), tl.device_s.tolist()):
        row = want.setdefault(k.module_path, [0, 0, 0.0, 0.0])
        row[0], row[1], row[2], row[3] = row[0] + 1, row[1] + k.macs, row[2] + o, row[3] + d
    assert [(lc.module_path, lc.n_launches, lc.macs, lc.host_s, lc.device_s)
            for lc in got.layers] == [(p, *r) for p, r in want.items()]
    assert [lc.n_launches for lc in got.layers] == [1, 2, 1]


def test_no_warnings_with_complete_profile(pred: Prediction) -> None:
    assert pred.warnings == ()


def test_list_of_batches_in_order(mlp: nn.Module, tiny_profile: HardwareProfile) -> None:
    batches = [4, 1, 2, 16]
    ps = predict_latency(mlp, "eager", tiny_profile, batches, inputs=torch.randn(1, IN))
    assert isinstance(ps, list) and len(ps) == len(batches)
    assert [p.batch for p in ps] == batches
    # macs are linear in batch: b·(16·32 + 32·8)
    assert [p.macs for p in ps] == [b * (IN * HID + HID * OUT) for b in batches]
    assert all(p.n_launches == 3 for p in ps)
    by_batch = {p.batch: p for p in ps}
    assert by_batch[16].compute_s > by_batch[1].compute_s
    assert by_batch[1].overhead_s == pytest.approx(by_batch[16].overhead_s)
    # all predictions share one crossover
    assert len({p.crossover_batch for p in ps}) == 1


def test_single_matches_list(mlp: nn.Module, tiny_profile: HardwareProfile) -> None:
    x = torch.randn(1, IN)
    one = predict_latency(mlp, "eager", tiny_profile, 4, inputs=x)
    (lst,) = predict_latency(mlp, "eager", tiny_profile, [4], inputs=x)
    assert one.latency_s == pytest.approx(lst.latency_s)


def test_range_and_tuple_batches(mlp: nn.Module, tiny_profile: HardwareProfile) -> None:
    x = torch.randn(1, IN)
    assert [p.batch for p in predict_latency(mlp, "eager", tiny_profile, range(1, 4),
                                             inputs=x)] == [1, 2, 3]
    assert [p.batch for p in predict_latency(mlp, "eager", tiny_profile, (8, 2),
                                             inputs=x)] == [8, 2]


def test_gpu_as_path(mlp: nn.Module, tiny_profile_path: Path, pred: Prediction) -> None:
    x = torch.randn(1, IN)
    for gpu in (tiny_profile_path, str(tiny_profile_path)):
        p = predict_latency(mlp, "eager", gpu, 1, inputs=x)
        assert p.latency_s == pytest.approx(pred.latency_s, rel=1e-12)


def test_callable_inputs(mlp: nn.Module, tiny_profile: HardwareProfile) -> None:
    p = predict_latency(mlp, "eager", tiny_profile, 3, inputs=lambda b: torch.randn(b, IN))
    assert p.macs == 3 * (IN * HID + HID * OUT)


def test_crossover_batch_function(mlp: nn.Module, tiny_profile: HardwareProfile,
                                  pred: Prediction) -> None:
    b = crossover_batch(mlp, "eager", tiny_profile, inputs=torch.randn(1, IN))
    assert b == pred.crossover_batch
    assert b is None or 1.0 <= b <= 1024.0


def test_an_exported_graph_gives_the_crossover_from_the_first_batch_alone(
        tiny_profile: HardwareProfile) -> None:
    # TorchScript, ONNX Runtime and inductor build an artifact per batch (an export, a
    # compile): their crossover comes from the first requested batch's program, MACs and
    # non-weight bytes in proportion to batch, not from two more builds; on an MLP (work
    # affine in batch) both ways agree
    import dataclasses

    from ftmodel.api import Predictor, kernel_at_batch

    wide = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 16))
    eager = Predictor("eager", tiny_profile)
    programs: dict[int, Any] = {}

    def program(b: int) -> Any:
        programs[b] = eager.lower(wide, torch.randn(b, 16), b,
                                  eager.trace(wide, torch.randn(b, 16), b))
        return programs[b]

    want = eager.crossover_from(program, 5, [])
    assert sorted(programs) == [2, 3] and want is not None
    exported = Predictor("eager", tiny_profile)
    exported.framework = dataclasses.replace(eager.framework,
                                             lower_model=lambda *a, **k: programs[5])
    assert exported.framework.builds_per_batch and not eager.framework.builds_per_batch
    programs.clear()
    got = exported.crossover_from(program, 5, [])
    assert sorted(programs) == [5]  # one program
    assert got == pytest.approx(want, rel=0.02)
    k = programs[5].kernels[0]  # the first GEMM: 5 rows of 16 against 16x32 weights
    k10 = kernel_at_batch(k, 5, 10)
    assert k10.macs == 2 * k.macs and k10.bytes_weights == k.bytes_weights
    assert k10.bytes_read - k.bytes_weights == 2 * (k.bytes_read - k.bytes_weights)
    assert k10.bytes_written == 2 * k.bytes_written


def test_package_exports() -> None:
    from ftmodel import errors
    from ftmodel.hardware.registry import list_profiles
    from ftmodel.oracle.cost_oracle import CostOracle
    from ftmodel.tools.compare import compare_frameworks
    assert ftmodel.predict_latency is predict_latency
    assert ftmodel.CostOracle is CostOracle and ftmodel.compare_frameworks is compare_frameworks
    assert ftmodel.list_profiles is list_profiles
    assert "a100-sxm4-80gb" in {e.name for e in ftmodel.list_profiles()}
    for name in ftmodel.__all__:
        assert hasattr(ftmodel, name), name
    public_errors = {n for n in errors.__all__ if isinstance(getattr(errors, n), type)}
    assert public_errors <= set(ftmodel.__all__), public_errors - set(ftmodel.__all__)


# ---- one spelling for the device, one for batch -----------------------------------------------

def test_device_keyword_and_its_deprecated_spelling(mlp: nn.Module,
                                                    tiny_profile: HardwareProfile) -> None:
    x = torch.randn(1, IN)
    by_position = predict_latency(mlp, "eager", tiny_profile, 2, inputs=x)
    by_keyword = predict_latency(mlp, "eager", device=tiny_profile, batch=2, inputs=x)
    assert by_keyword.latency_s == by_position.latency_s
    with pytest.warns(DeprecationWarning, match=r"gpu= is deprecated; use device="):
        old = predict_latency(mlp, "eager", gpu=tiny_profile, batch=2, inputs=x)
    assert old.latency_s == by_position.latency_s
    with pytest.warns(DeprecationWarning, match="gpu="):
        assert crossover_batch(mlp, gpu=tiny_profile, inputs=x) == by_position.crossover_batch
    with pytest.raises(InvalidArgumentError, match="pass device= only"):
        predict_latency(mlp, "eager", tiny_profile, 2, inputs=x, gpu=tiny_profile)


def test_oracle_and_compare_take_the_same_spellings(mlp: nn.Module,
                                                    tiny_profile: HardwareProfile) -> None:
    x = torch.randn(1, IN)
    expected = predict_latency(mlp, "eager", tiny_profile, [1, 4], inputs=x)
    oracle = ftmodel.CostOracle("eager", device=tiny_profile, heap="plain")
    assert [p.latency_s for p in oracle.latency(mlp, [1, 4], x)] == \
        [p.latency_s for p in expected]
    with pytest.warns(DeprecationWarning, match="batches= is deprecated; use batch="):
        res = oracle.latencies([mlp], batches=[1, 4], inputs=x)
    assert res.latency_s.tolist() == [[p.latency_s for p in expected]]
    with pytest.warns(DeprecationWarning, match="gpu="):
        ftmodel.CostOracle("eager", gpu=tiny_profile)
    with pytest.warns(DeprecationWarning, match="gpu="):
        cmp = ftmodel.compare_frameworks(mlp, gpu=tiny_profile, batch=[1, 4], inputs=x,
                                         frameworks=["eager"])
    assert [p.latency_s for p in cmp.predictions["eager"]] == [p.latency_s for p in expected]


def test_missing_extra_names_the_pip_install(monkeypatch: pytest.MonkeyPatch,
                                             tiny_profile: HardwareProfile) -> None:
    import sys
    from ftmodel.errors import MissingExtraError
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # import onnxruntime -> ImportError
    with pytest.raises(MissingExtraError, match=r"pip install 'ftmodel\[onnxruntime\]'") as info:
        ftmodel.Predictor("onnxruntime", tiny_profile)
    assert info.value.extra == "onnxruntime" and isinstance(info.value, ImportError)


# ---- framework names ----------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["pytorch", "PyTorch", " EAGER ", "torch"])
def test_aliases_resolve_to_eager(name: str, mlp: nn.Module,
                                  tiny_profile: HardwareProfile) -> None:
    assert canonical_framework(name) == "eager"
    p = predict_latency(mlp, name, tiny_profile, 1, inputs=torch.randn(1, IN))
    assert p.framework == "eager"


def test_unknown_framework(mlp: nn.Module, tiny_profile: HardwareProfile) -> None:
    with pytest.raises(UnknownNameError) as err:
        predict_latency(mlp, "pytorh", tiny_profile, 1, inputs=torch.randn(1, IN))
    msg = str(err.value)
    assert "'pytorh'" in msg
    for valid in ("eager", "pytorch", "onnxruntime", "inductor"):
        assert valid in err.value.valid and valid in msg
    assert "Did you mean 'pytorch'?" in msg


def test_modelled_framework_needs_its_host_costs(mlp: nn.Module,
                                                 tiny_profile: HardwareProfile) -> None:
    # onnxruntime is modelled now; the tiny profile has host costs for eager only
    with pytest.raises(ProfileError) as err:
        predict_latency(mlp, "ort", tiny_profile, 1, inputs=torch.randn(1, IN))
    assert "'onnxruntime'" in str(err.value) and "--frameworks onnxruntime" in str(err.value)


# ---- bad arguments ------------------------------------------------------------------------------

@pytest.mark.parametrize("batch", [0, -1, 1.5, True, "8"])
def test_bad_batch(batch: Any, mlp: nn.Module, tiny_profile: HardwareProfile) -> None:
    with pytest.raises(InvalidArgumentError) as err:
        predict_latency(mlp, "eager", tiny_profile, batch, inputs=torch.randn(1, IN))
    assert repr(batch) in str(err.value)


def test_bad_batch_in_list(mlp: nn.Module, tiny_profile: HardwareProfile) -> None:
    with pytest.raises(InvalidArgumentError, match="got 0"):
        predict_latency(mlp, "eager", tiny_profile, [1, 0], inputs=torch.randn(1, IN))


def test_inputs_not_inferable(tiny_profile: HardwareProfile) -> None:
    with pytest.raises(InvalidArgumentError, match="inputs=") as err:
        predict_latency(nn.Linear(IN, OUT), "eager", tiny_profile, 1)
    assert "Linear" in str(err.value)


def test_model_not_a_module(tiny_profile: HardwareProfile) -> None:
    with pytest.raises(InvalidArgumentError, match="nn.Module"):
        predict_latency(lambda x: x, "eager", tiny_profile, 1,  # type: ignore[arg-type]
                        inputs=torch.randn(1, IN))


def test_unknown_dtype(mlp: nn.Module, tiny_profile: HardwareProfile) -> None:
    with pytest.raises(InvalidArgumentError, match="'fp64'") as err:
        predict_latency(mlp, "eager", tiny_profile, 1, inputs=torch.randn(1, IN), dtype="fp64")
    assert "fp32" in str(err.value)  # lists the valid ones


def test_dtype_alias(mlp: nn.Module, tiny_profile: HardwareProfile) -> None:
    p = predict_latency(mlp, "eager", tiny_profile, 1, inputs=torch.randn(1, IN),
                        dtype="float32")
    assert p.dtype == "fp32"


def test_dtype_unsupported_by_profile(mlp: nn.Module, tiny_profile: HardwareProfile) -> None:
    assert tiny_profile.device.dtypes == ("fp32",)
    with pytest.raises(InvalidArgumentError, match="'fp16'") as err:
        predict_latency(mlp, "eager", tiny_profile, 1, inputs=torch.randn(1, IN), dtype="fp16")
    assert tiny_profile.name in str(err.value)


def test_corrupt_profile_path(mlp: nn.Module, tmp_path: Path) -> None:
    path = tmp_path / "corrupt.json"
    path.write_text("{not json", encoding="utf-8")
    with pytest.raises(ProfileError, match="not valid JSON") as err:
        predict_latency(mlp, "eager", str(path), 1, inputs=torch.randn(1, IN))
    assert str(path) in str(err.value)


def test_missing_profile_path(mlp: nn.Module, tmp_path: Path) -> None:
    with pytest.raises(ProfileError, match="does not exist"):
        predict_latency(mlp, "eager", str(tmp_path / "nope.json"), 1, inputs=torch.randn(1, IN))


def test_framework_without_host_costs(mlp: nn.Module, profile_factory: Any) -> None:
    prof = profile_factory(name="no-eager", frameworks={
        "onnxruntime": FrameworkHost(per_event_s={"kernel:gemm": 1e-6})})
    with pytest.raises(ProfileError) as err:
        predict_latency(mlp, "eager", prof, 1, inputs=torch.randn(1, IN))
    msg = str(err.value)
    assert "'eager'" in msg and "onnxruntime" in msg  # what is missing and what there is
    assert "ftmodel calibrate" in msg and "--frameworks eager" in msg


def test_profile_without_host_half(mlp: nn.Module, profile_factory: Any) -> None:
    prof = profile_factory(name="device-only", with_host=False)
    with pytest.raises(ProfileError, match="host"):
        predict_latency(mlp, "eager", prof, 1, inputs=torch.randn(1, IN))


def test_host_override(mlp: nn.Module, profile_factory: Any, tiny_profile: HardwareProfile,
                       pred: Prediction) -> None:
    device_only = profile_factory(name="device-only", with_host=False)
    p = predict_latency(mlp, "eager", device_only, 1, inputs=torch.randn(1, IN),
                        host=tiny_profile)
    assert p.overhead_s == pytest.approx(pred.overhead_s)


def test_unknown_profile_name(mlp: nn.Module) -> None:
    with pytest.raises(UnknownNameError, match="'no-such-gpu'"):
        predict_latency(mlp, "eager", "no-such-gpu", 1, inputs=torch.randn(1, IN))


def test_missing_class_warns(mlp: nn.Module, profile_factory: Any,
                             tiny_profile: HardwareProfile) -> None:
    classes = {k: v for k, v in tiny_profile.device.op_classes.items() if k != "gemm"}
    prof = profile_factory(name="no-gemm", op_classes=classes)
    p = predict_latency(mlp, "eager", prof, 1, inputs=torch.randn(1, IN))
    assert any("'gemm'" in w and "'bmm'" in w for w in p.warnings)
    # repeated warnings are aggregated: the gemm fallback is reported once
    assert sum("'gemm'" in w for w in p.warnings) == 1


def test_write_and_reload_predicts_same(mlp: nn.Module, tiny_profile: HardwareProfile,
                                        tmp_path: Path, pred: Prediction) -> None:
    path = write_profile(tiny_profile, tmp_path / "again.json")
    p = predict_latency(mlp, "eager", path, 1, inputs=torch.randn(1, IN))
    assert p.as_dict() == pred.as_dict()


def test_numpy_scalar_batch(mlp: nn.Module, tiny_profile: HardwareProfile) -> None:
    import numpy as np
    x = torch.randn(1, IN)
    (from_list,) = predict_latency(mlp, "eager", tiny_profile, [np.int64(4)], inputs=x)
    p = predict_latency(mlp, "eager", tiny_profile, np.int64(4), inputs=x)
    assert p.batch == from_list.batch == 4


def test_numpy_batches_in_list(mlp: nn.Module, tiny_profile: HardwareProfile) -> None:
    import numpy as np
    ps = predict_latency(mlp, "eager", tiny_profile, np.array([1, 8]), inputs=torch.randn(1, IN))
    assert [p.batch for p in ps] == [1, 8]


# ---- "auto" and async devices -------------------------------------------------------------------

def test_auto_without_gpu_or_calibration(mlp: nn.Module, tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FTMODEL_HOME", str(tmp_path / "empty-home"))
    monkeypatch.setattr("ftmodel.hardware.nvml.local_gpu_profile_name", lambda index=0: None)
    with pytest.raises(ProfileError, match="ftmodel calibrate"):
        predict_latency(mlp, "eager", "auto", 1, inputs=torch.randn(1, IN))


def test_auto_uses_local_cpu_profile(mlp: nn.Module, tmp_path: Path, profile_factory: Any,
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    monkeypatch.setenv("FTMODEL_HOME", str(home))
    monkeypatch.setattr("ftmodel.hardware.nvml.local_gpu_profile_name", lambda index=0: None)
    write_profile(profile_factory(name="local-cpu"), home / "profiles" / "local-cpu.json")
    p = predict_latency(mlp, inputs=torch.randn(1, IN))  # framework="eager", device="auto"
    assert p.device == "local-cpu" and p.framework == "eager"


def test_async_profile(mlp: nn.Module, profile_factory: Any) -> None:
    prof = profile_factory(name="fake-gpu", execution="async", launch_latency_s=2e-6,
                           sync_s=5e-6)
    p = predict_latency(mlp, "eager", prof, 1, inputs=torch.randn(1, IN))
    assert p.latency_s >= p.closed_form_s == pytest.approx(max(p.overhead_s, p.compute_s))
    assert p.latency_s <= p.overhead_s + p.compute_s + 3 * 2e-6 + 5e-6
    assert 0.0 <= p.framework_tax <= 1.0


# ---- heap state: glibc's page faults in a plain process ------------------------------------

def _wide() -> nn.Module:
    # (B, 64) -> (B, 8192) -> (B, 8192): at batch 64 each activation is 2 MiB, above glibc's
    # initial 128 KiB mmap threshold
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(64, 8192), nn.ReLU(), nn.Linear(8192, 8192), nn.ReLU())


def test_plain_heap_adds_the_simulated_faults_at_the_calibrated_price(
        profile_factory: Any) -> None:
    from ftmodel.estimate.allocator import page_faults

    prof = profile_factory(page_fault_s=1e-6)
    model, x = _wide(), torch.randn(64, 64)
    kept = predict_latency(model, "eager", prof, 64, inputs=x, heap="kept")
    plain = predict_latency(model, "eager", prof, 64, inputs=x)  # the default: a plain process
    assert (kept.heap, plain.heap) == ("kept", "plain")
    assert kept.page_faults == 0.0
    predictor = ftmodel.api.Predictor("eager", prof)
    tr = predictor.trace(model, x, 64)
    faults = page_faults(predictor.lower(model, x, 64, tr).kernels).sum()
    assert plain.page_faults == faults
    assert plain.latency_s - kept.latency_s == pytest.approx(faults * 1e-6, rel=1e-9)
    assert plain.overhead_s - kept.overhead_s == pytest.approx(faults * 1e-6, rel=1e-9)
    assert plain.compute_s == kept.compute_s


def test_torchscript_pays_the_faults_of_its_own_allocations(profile_factory: Any) -> None:
    from ftmodel.estimate.allocator import page_faults
    from ftmodel.hardware.profile import FrameworkHost

    host = FrameworkHost(per_event_s={"kernel:gemm": 1e-6, "kernel:elementwise": 1e-6},
                         per_call_s=1e-6)
    prof = profile_factory(page_fault_s=1e-6, frameworks={"torchscript": host})
    model, x = _wide().eval(), torch.randn(64, 64)
    kept = predict_latency(model, "torchscript", prof, 64, inputs=x, heap="kept")
    plain = predict_latency(model, "torchscript", prof, 64, inputs=x)
    assert plain.heap == "plain" and not any("not simulated" in w for w in plain.warnings)
    predictor = ftmodel.api.Predictor("torchscript", prof)
    tr = predictor.trace(model, x, 64)
    faults = page_faults(predictor.lower(model, x, 64, tr).kernels).sum()
    # its frozen graph's 2 MiB activations are mapped and faulted in afresh, as eager's are
    assert faults > 0 and plain.page_faults == faults
    assert plain.latency_s - kept.latency_s == pytest.approx(faults * 1e-6, rel=1e-9)


def test_a_profile_without_a_page_fault_price_predicts_the_kept_heap_and_says_so(
        profile_factory: Any) -> None:
    old = profile_factory(page_fault_s=0.0)  # calibrated before the price was measured
    p = predict_latency(_wide(), "eager", old, 8, inputs=torch.randn(8, 64), heap="plain")
    assert p.heap == "kept" and p.page_faults == 0.0
    assert any("page-fault cost" in w for w in p.warnings)


def test_bad_heap_names_the_choices(tiny_profile: HardwareProfile) -> None:
    with pytest.raises(InvalidArgumentError, match="'plain', 'kept'"):
        predict_latency(_wide(), "eager", tiny_profile, 1, inputs=torch.randn(1, 64),
                        heap="jemalloc")
