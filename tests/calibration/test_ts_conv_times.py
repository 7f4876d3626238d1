from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import pytest
import torch

from ftmodel.calibration import framework_ops, ts_conv_times
from ftmodel.calibration.ops import CPU_GRID, op_samples
from ftmodel.calibration.runtime_timing import ts_prepacked_conv
from ftmodel.calibration.ts_conv_times import PLAIN_LABEL
from ftmodel.hardware.profile import HardwareProfile
from ftmodel.measure import Measurement
from ftmodel.tracing.prepacked_variants import PLAIN_INPUT

pytestmark = pytest.mark.skipif(not torch.backends.mkldnn.is_available(),
                                reason="needs MKLDNN (CPU)")


def test_a_plain_input_call_reorders_it_and_returns_the_blocked_calls_values() -> None:
    """The plain-input call takes to_mkldnn's tensor as it is (its layout is the plain one) and
    computes what the blocked-input call computes."""
    sample = next(s for s in op_samples(True, CPU_GRID)["conv"] if not s.is_floor)
    blocked, plain = ts_prepacked_conv(sample), ts_prepacked_conv(sample, plain=True)
    assert blocked is not None and plain is not None
    with torch.no_grad():
        torch.testing.assert_close(plain().to_dense(), blocked().to_dense(), rtol=1e-4,
                                   atol=1e-4)


def test_each_convolution_sample_gets_a_twin_timed_on_a_plain_input(
        monkeypatch: pytest.MonkeyPatch, tiny_profile: HardwareProfile) -> None:
    """Each TorchScript convolution sample's row is its blocked call's time less the floor's,
    under its variant without the plain-input suffix; its twin's the plain call's less the
    floor's plain call, under the variant with it. The twins make the plain variants' curves,
    the blocked rows the others' and the op's own curve."""
    samples = op_samples(True, CPU_GRID)["conv"]
    floor = next(s.label for s in samples if s.is_floor)

    def sessions(fns: Mapping[str, Callable[[], object]], **_: Any) -> dict[str, Measurement]:
        return {label: Measurement(1e-4, (1.0,), 1) for label in fns}

    def nodes(fns: Mapping[tuple[str, bool], Callable[[], object]], **_: Any
              ) -> dict[tuple[str, bool], Measurement]:
        # the floor's call 10 µs either way; each sample's 30 µs blocked, 70 µs plain
        return {(label, plain): Measurement(1e-5 if label == floor else 7e-5 if plain else 3e-5,
                                            (1.0,), 1) for label, plain in fns}

    monkeypatch.setattr(framework_ops, "measure_interleaved", sessions)
    monkeypatch.setattr(ts_conv_times, "measure_interleaved", nodes)
    data, raw, op = framework_ops.framework_curve(
        "torchscript", samples, "cpu", tiny_profile.device, rounds=1, round_s=0.01, by_op=True)
    assert data is not None and op == "mkldnn_convolution"
    timed = [r for r in raw if "total_s" in r]
    twins = [r for r in timed if str(r["label"]).endswith(PLAIN_LABEL)]
    assert len(twins) == len(timed) // 2 == len(samples) - 1
    assert all(str(r["variant"]).endswith(PLAIN_INPUT) for r in twins)
    assert not any(str(r["variant"]).endswith(PLAIN_INPUT) for r in timed if r not in twins)
    times = [row[-1] for row in data.samples]
    plain_rows = [t for t, r in zip(times, timed) if r in twins]
    blocked_rows = [t for t, r in zip(times, timed) if r not in twins]
    assert plain_rows == pytest.approx([6e-5] * len(twins))
    assert blocked_rows == pytest.approx([2e-5] * len(twins))
    key = f"torchscript/conv@{op}"
    curves = framework_ops.variant_curves(key, data, raw)
    assert any(k.endswith(PLAIN_INPUT) for k in curves)
    for name, curve in curves.items():
        want = 6e-5 if name.endswith(PLAIN_INPUT) else 2e-5
        assert [row[-1] for row in curve.samples] == pytest.approx([want] * len(curve.samples))
    own = framework_ops.without_samples(data, raw, {str(r["label"]) for r in twins})
    assert [row[-1] for row in own.samples] == pytest.approx([2e-5] * len(blocked_rows))
