"""calibration.runtime_timing.ts_conv_chain: the graphs that time a prepacked convolution."""

from __future__ import annotations

import torch
from torch import nn

from ftmodel.calibration.ops import OpSample
from ftmodel.calibration.runtime_timing import ts_conv_chain


def _sample(module: nn.Module, x: torch.Tensor) -> OpSample:
    return OpSample("conv", "conv", "test", module.eval().requires_grad_(False), (x,))


def test_chain_leads_with_a_depthwise_convolution_whose_weights_stay_small() -> None:
    conv = nn.Conv2d(64, 32, 3, padding=1, bias=False)
    chain = ts_conv_chain(_sample(conv, torch.randn(2, 64, 8, 8)))
    assert chain is not None
    both, pre = chain
    assert isinstance(pre, nn.Conv2d) and pre.groups == pre.in_channels == 64
    assert pre.weight.numel() == 64  # a few KiB, not the 64 x 64 of a full 1x1 convolution
    assert isinstance(both, nn.Sequential) and list(both) == [pre, conv]
    assert not both.training and not pre.weight.requires_grad
    with torch.no_grad():
        assert both(torch.randn(2, 64, 8, 8)).shape == (2, 32, 8, 8)


def test_frozen_chain_runs_the_sample_on_the_leading_convolution_s_blocked_output() -> None:
    """In the optimized graph both convolutions are prepacked oneDNN ones with no reorder
    between them, as in a model (the point of timing the sample after another one)."""
    from ftmodel.frameworks import torchscript as ts

    x = torch.randn(1, 32, 6, 6)
    chain = ts_conv_chain(_sample(nn.Conv2d(32, 48, 3, padding=1, bias=False), x))
    assert chain is not None
    art = ts.build(chain[0], (x,), 1, None)
    kinds = [n.kind() for n in art.graph.nodes() if not n.kind().startswith("prim::Constant")]
    convs = [i for i, k in enumerate(kinds) if k == "prim::mkldnn_convolution"]
    assert len(convs) == 2 and convs[1] == convs[0] + 1, kinds


def test_no_chain_for_a_sample_that_is_not_a_2d_convolution() -> None:
    conv1d = nn.Conv1d(8, 8, 3)
    assert ts_conv_chain(_sample(conv1d, torch.randn(1, 8, 16))) is None
