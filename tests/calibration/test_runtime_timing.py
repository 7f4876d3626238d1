"""calibration.runtime_timing: the call that times a prepacked convolution; ONNX Runtime's
profiler shares taken pass after pass."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from ftmodel.calibration.ops import OpSample
from ftmodel.calibration import runtime_timing
from ftmodel.calibration.runtime_timing import ort_node_shares, ts_prepacked_conv


def _sample(module: nn.Module, x: torch.Tensor) -> OpSample:
    return OpSample("conv", "conv", "test", module.eval().requires_grad_(False), (x,))


@pytest.mark.parametrize("cin,cout,k,stride,groups,bias", [
    (32, 48, 3, 1, 1, False), (64, 64, 3, 2, 64, True), (16, 96, 1, 1, 1, False),
    (24, 48, 5, 2, 4, True)])
def test_the_call_computes_the_convolution_on_a_blocked_input_and_leaves_it_blocked(
        cin: int, cout: int, k: int, stride: int, groups: int, bias: bool) -> None:
    torch.manual_seed(0)
    conv = nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=bias)
    x = torch.randn(2, cin, 9, 9)
    run = ts_prepacked_conv(_sample(conv, x))
    assert run is not None
    with torch.no_grad():
        out = run()
        want = conv(x)
    assert out.is_mkldnn  # no reorder back to a plain tensor inside the timed call
    torch.testing.assert_close(out.to_dense(), want, rtol=1e-4, atol=1e-4)


def test_no_call_for_a_sample_that_is_not_a_2d_convolution() -> None:
    conv1d = nn.Conv1d(8, 8, 3)
    assert ts_prepacked_conv(_sample(conv1d, torch.randn(1, 8, 16))) is None
    same = nn.Conv2d(8, 8, 3, padding="same")
    assert ts_prepacked_conv(_sample(same, torch.randn(1, 8, 6, 6))) is None


def test_onnxruntime_shares_are_taken_pass_after_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    # each sample's share once per pass, every sample in a pass before the next pass begins, so
    # that one slow moment sets one share of a sample, not all of them
    calls: list[str] = []
    outcome = {"a": [0.6, 0.25, 0.62], "b": [None, None, None], "c": [0.5, 0.5, 0.9]}

    def share(sample: OpSample, batch: int, op_type: str) -> float | None:
        assert (batch, op_type) == (2, "Conv")
        calls.append(sample.label)
        return outcome[sample.label][calls.count(sample.label) - 1]

    monkeypatch.setattr(runtime_timing, "ort_node_share", share)
    conv = nn.Conv2d(4, 4, 1)
    samples = [(OpSample("conv", "conv", label, conv, (torch.randn(2, 4, 3, 3),)), 2, "Conv")
               for label in "abc"]
    got = ort_node_shares(samples, passes=3)
    assert calls == list("abc" * 3)
    assert got == {"a": [0.6, 0.25, 0.62], "b": [], "c": [0.5, 0.5, 0.9]}
