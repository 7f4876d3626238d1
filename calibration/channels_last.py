"""Inductor's convolutions on a CPU, as calibration times them: aten's, on channels-last tensors.

On a CPU with oneDNN, inductor lays out every graph that has a convolution channels-last
(``torch._inductor.graph.GraphLowering.decide_layout_opt``) and hands each convolution to aten
(``extern_kernels.convolution``) with channels-last input and weight. oneDNN then picks other
kernels than for eager's contiguous (NCHW) tensors, several-fold faster or slower by shape (a
2-vCPU AMD EPYC, 2 threads): a depthwise 3x3 at 28 px 0.36-0.5x eager's time, a 3x3 64->64 at
batch 16 0.47x, a 1x1 64->128 at batch 4 0.2-0.6x, but a 1x1 1024->2048 on a 3x3 map at batch 4
about 4x (3.9 against 1.0 ms): its weights go through a generic reorder into oneDNN's blocked
format on every call, at a few GB/s.

Timing a lone convolution through ``torch.compile`` costs a C++ build per sample, so only a
few sizes could be afforded, too few for a curve over MACs and bytes. Running the same aten call
eagerly on channels-last tensors times the same oneDNN kernel with no build, on the full grid.

What is timed: the sample's module with its weights, and its 4-d inputs, converted to
``torch.channels_last`` (other inputs as they are). What is not: the layout conversions
inductor generates around its convolutions (input and weight copies into channels-last), which
are kernels of its own, priced on its copy curve. The sample's kernel takes the variant
inductor's lowering gives such a call (``<backend>_nhwc``,
:func:`ftmodel.tracing.variants.channels_last_conv_variant`), so its curves price only 2-d
convolutions on channels-last tensors; 1-d ones, which inductor leaves contiguous, keep eager's.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import replace

import torch
from torch import nn

from ftmodel.calibration.op_sample import OpSample
from ftmodel.frameworks import eager
from ftmodel.program import Kernel, Program
from ftmodel.tracing.dispatch import trace
from ftmodel.tracing.variants import channels_last_conv_variant

__all__ = ["channels_last_run"]


def channels_last_run(sample: OpSample) -> tuple[Program, Callable[[], object]]:
    """(the sample's eager Program, whose kernel is the convolution the curve's row describes,
    with the variant of a channels-last call; a zero-argument callable running the sample on
    channels-last tensors)."""
    program = eager.lower(trace(sample.module, sample.inputs))
    conv = sample.module
    if isinstance(conv, nn.Conv2d) and sample.inputs and sample.inputs[0].dim() == 4:
        args = (sample.inputs[0], conv.weight, conv.bias, conv.stride, conv.padding,
                conv.dilation, False, (0, 0), conv.groups)
        variant = channels_last_conv_variant(args)

        def relabel(k: Kernel) -> Kernel:
            return replace(k, variant=variant) if k.op_class.startswith("conv") else k
        program = replace(program, kernels=tuple(relabel(k) for k in program.kernels))
    module = copy.deepcopy(sample.module).to(memory_format=torch.channels_last)
    inputs = tuple(t.contiguous(memory_format=torch.channels_last) if t.dim() == 4 else t
                   for t in sample.inputs)

    def run() -> object:
        with torch.no_grad():
            return module(*inputs)

    return program, run
