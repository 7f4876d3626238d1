"""ONNX Runtime's inner-call samples (ftmodel.calibration.ort_loops)."""

from __future__ import annotations

import pytest

from ftmodel.calibration.ort_loops import LOOP_CURVES, loop_samples
from tests.conftest import lower_with_onnxruntime


def test_each_family_has_a_floor_and_three_or_more_counts() -> None:
    for quick in (True, False):
        samples = loop_samples(quick)
        assert set(samples) == set(LOOP_CURVES)
        for fam, rows in samples.items():
            assert rows[0].is_floor and not any(s.is_floor for s in rows[1:])
            assert {s.family for s in rows} == {fam}
            assert all(s.op_class == LOOP_CURVES[fam].split(":")[0] for s in rows)


@pytest.mark.requires_onnxruntime
def test_the_lowering_counts_the_calls_each_sample_was_built_to_make() -> None:
    # the companion is fitted against the counts the lowering gives its main kernel: they must
    # be the ones the sample was drawn for (calls or spans = its first dimension)
    for fam, rows in loop_samples(quick=True).items():
        counts = set()
        for s in rows[1:]:
            prog = lower_with_onnxruntime(s.module, s.inputs, int(s.inputs[0].shape[0]))
            main = [k for k in prog.kernels if k.op_class == s.op_class]
            assert len(main) == 1, (s.label, prog.kernels)
            assert main[0].planes == s.inputs[0].shape[0], s.label
            counts.add(main[0].planes)
        assert len(counts) >= 3, fam
        if fam == "transpose calls":
            assert all(k.variant == "transpose_mlas" for k in main)
