"""TorchScript's prepacked oneDNN convolutions timed as its frozen graphs call them, on both
input layouts a graph hands them: a previous convolution's blocked output, and the plain layout
``aten::to_mkldnn`` leaves (before a graph's first convolution and after every op that runs on
dense tensors), which oneDNN reorders into its blocked format inside the call.

Each convolution sample of :func:`ftmodel.calibration.framework_ops.framework_curve` is timed
both ways in the same interleaved rounds (:func:`ts_node_times`). The blocked time makes the
sample's row of the curve of its variant without
:data:`~ftmodel.tracing.prepacked_variants.PLAIN_INPUT`; the plain one a twin row
(:func:`plain_twin`, label ending :data:`PLAIN_LABEL`) of the variant with it, from which the
``...:<variant>_plain`` curves are made. The class's own curve
(``torchscript/conv@mkldnn_convolution``) keeps the blocked rows only.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator, Sequence
from typing import Any

import torch

from ftmodel.calibration.chunks import time_in_chunks
from ftmodel.calibration.op_sample import OpSample
from ftmodel.calibration.runtime_timing import ts_prepacked_conv
from ftmodel.measure import Measurement, measure_interleaved
from ftmodel.tracing.prepacked_variants import PLAIN_INPUT, without_plain_input

__all__ = ["PLAIN_LABEL", "plain_twin", "ts_node_times"]

# what ends the label of a sample's twin row timed on a plain input
PLAIN_LABEL = ":plain"


def ts_node_times(samples: Sequence[OpSample], labels: Collection[str], *, rounds: int,
                  round_s: float) -> tuple[dict[str, float], dict[str, float]]:
    """Each convolution sample of ``labels``' oneDNN call, as its frozen graph makes it
    (:func:`~ftmodel.calibration.runtime_timing.ts_prepacked_conv`), on a blocked input and on
    a plain one, timed in the same interleaved rounds; (blocked, plain) seconds by label. (Timed
    instead by torch.profiler, once per graph, the same 512-channel 3x3 convolution read
    0.38-1.07 ms on the EPYC from one calibration to the next; as the difference of two frozen
    graphs, it carried the difference of their output reorders.)"""
    def convs() -> Iterator[tuple[tuple[str, bool], Callable[[], object]]]:
        for s in samples:  # each with its blocked weights and operands: timed, then let go
            if s.label not in labels:
                continue
            for plain in (False, True):
                run = ts_prepacked_conv(s, plain=plain)
                if run is not None:
                    yield (s.label, plain), run

    def measure(fns: dict[tuple[str, bool], Callable[[], object]]
                ) -> dict[tuple[str, bool], Measurement]:
        with torch.no_grad():
            return measure_interleaved(fns, rounds=rounds, round_s=round_s)

    timed = time_in_chunks({}, convs(), measure)
    blocked = {label: m.time_s for (label, plain), (m, _) in timed.items() if not plain}
    plain_s = {label: m.time_s for (label, plain), (m, _) in timed.items() if plain}
    return blocked, plain_s


def plain_twin(row: dict[str, Any], plain_s: float, floor_plain_s: float
               ) -> tuple[float, dict[str, Any]]:
    """(device seconds, raw row) of the twin of a sample's raw ``row`` (its blocked time's)
    timed on a plain input: ``plain_s`` less the floor sample's plain time, its variant ending
    with :data:`~ftmodel.tracing.prepacked_variants.PLAIN_INPUT`, its label with
    :data:`PLAIN_LABEL`."""
    device_s = max(plain_s - floor_plain_s, 1e-9)
    return device_s, {**row, "label": f"{row['label']}{PLAIN_LABEL}",
                      "variant": without_plain_input(str(row["variant"])) + PLAIN_INPUT,
                      "node_s": plain_s}
