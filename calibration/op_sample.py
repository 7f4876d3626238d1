"""One sample of the op sweeps: an op at one size, wrapped in a module so the predictor's own tracer
counts its work, and the row of its curve it gives (:mod:`ftmodel.calibration.ops` draws them).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from ftmodel.estimate.curves import STEP_CURVES, WINDOWS, step_work
from ftmodel.program import Kernel
from ftmodel.tracing.rnn_variants import steps_of

__all__ = ["OpSample", "random_tensor"]


def random_tensor(*shape: int) -> torch.Tensor:
    """A sample's input of ``shape``, normal random values."""
    return torch.randn(*shape)


@dataclass
class OpSample:
    curve: str  # op class, optionally ":variant"
    family: str  # samples of one family share a floor
    label: str
    module: nn.Module
    inputs: tuple[torch.Tensor, ...]
    is_floor: bool = False
    # a fused recurrent layer's sample: the same module over fewer steps, timed beside it, so
    # that its time splits into a cost per step and one per call (see sweep_stage.class_stage)
    short_inputs: tuple[torch.Tensor, ...] = ()

    @property
    def op_class(self) -> str:
        return self.curve.split(":")[0]

    def curve_row(self, main: Kernel, device_s: float
                  ) -> tuple[tuple[float, float, float, float], float]:
        """(the curve's row for this sample: ``main`` kernel's MACs, bytes read (each re-read
        of its weights counted, ``Kernel.read_traffic_bytes``), bytes written and
        ``device_s``; the steps they were divided by). On a per-window curve
        (:data:`~ftmodel.estimate.curves.WINDOWS`) the bytes read are those the pool's windows
        read (``Kernel.bytes_window_reads``). On a per-step curve
        (:data:`~ftmodel.estimate.curves.STEP_CURVES`) the row holds one step's share of the
        layer's work and time, else the whole kernel's (steps 1)."""
        steps = float(steps_of(main.variant)[0]) if self.curve in STEP_CURVES else 1.0
        read = main.bytes_window_reads if self.curve.endswith(WINDOWS) else \
            main.read_traffic_bytes
        macs, br, bw = step_work(*(np.array([float(v)]) for v in (
            main.macs, read, main.bytes_weights, main.bytes_written, steps)))
        return (float(macs[0]), float(br[0]), float(bw[0]), device_s / steps), steps
