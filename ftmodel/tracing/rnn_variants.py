"""Variants of fused recurrent kernels (LSTM, GRU, RNN layers): ``steps=<n>,rec=<share>``,
their sequential steps and the share of their work that runs step by step, and ``,dirs=<d>``
where one kernel runs several directions one after the other (:func:`rnn_variant`, read back
by :func:`steps_of` and :func:`directions_of`). :func:`ftmodel.tracing.formulas.variant_of`
gives an aten recurrent op this variant; ONNX Runtime's lowering gives its LSTM/GRU/RNN nodes
the same.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

__all__ = ["RNN_OPS", "directions_of", "recurrent_share", "rnn_recurrent_share", "rnn_steps",
           "rnn_variant", "steps_of"]


# recurrent ops: where their batch_first flag sits (-1: the input is always time-major, as
# mkldnn_rnn_layer's is whatever its flag says), and whether one op runs all layers
_RNN_BATCH_FIRST = {"mkldnn_rnn_layer": (-1, False), "_cudnn_rnn": (10, True),
                    "miopen_rnn": (10, True), "lstm": (8, True), "gru": (8, True),
                    "rnn_tanh": (8, True), "rnn_relu": (8, True)}
RNN_OPS = frozenset(_RNN_BATCH_FIRST)


def rnn_steps(name: str, args: Sequence[Any]) -> int:
    """The sequential steps of a fused recurrent op: its time steps, times its layers when one
    op runs them all (each step depends on the previous one; 0 if the arguments say nothing)."""
    at, all_layers = _RNN_BATCH_FIRST[name]
    x = tuple(args[0].shape) if args and isinstance(args[0], torch.Tensor) else ()
    if len(x) < 2:
        return 0
    batch_first = at >= 0 and len(args) > at and isinstance(args[at], bool) and bool(args[at])
    steps = x[1] if batch_first and len(x) == 3 else x[0]
    if all_layers:  # lstm/gru(input, hx, params, has_biases, num_layers, ...)
        idx = 9 if name in ("_cudnn_rnn", "miopen_rnn") else 4
        layers = args[idx] if len(args) > idx and isinstance(args[idx], int) else 1
        steps *= max(1, layers)
    return int(steps)


def rnn_variant(steps: int, recurrent_share: float, directions: int = 1) -> str:
    """The variant of a fused recurrent kernel (``steps=<n>,rec=<share>``, read back by
    :func:`steps_of`; ``,dirs=<d>`` where one kernel runs ``directions`` directions one after
    the other, its steps counting all of them: :func:`directions_of`); "" for a single
    step."""
    if steps <= 1:
        return ""
    return f"steps={steps},rec={recurrent_share:.4f}" + (f",dirs={directions}"
                                                         if directions > 1 else "")


def _rnn_fields(variant: str) -> dict[str, str]:
    """The ``name=value`` fields of a fused recurrent kernel's variant (:func:`rnn_variant`);
    empty for any other variant."""
    if not variant.startswith("steps="):
        return {}
    return dict(f.split("=", 1) for f in variant.split(",") if "=" in f)


def directions_of(variant: str) -> int:
    """The directions a fused recurrent kernel runs one after the other (``dirs=<d>`` in its
    variant, :func:`rnn_variant`): each of its steps reads one direction's weights; else 1."""
    try:
        return max(1, int(_rnn_fields(variant).get("dirs", 1)))
    except ValueError:
        return 1


def steps_of(variant: str) -> tuple[int, float]:
    """(sequential steps, share of the work that runs step by step) that a kernel's variant
    declares (``steps=<n>,rec=<share>``), else (1, 0.0)."""
    fields = _rnn_fields(variant)
    try:
        return max(1, int(fields["steps"])), min(1.0, max(0.0, float(fields.get("rec", 1.0))))
    except (KeyError, ValueError):
        return 1, 0.0


def recurrent_share(input_weights: int, hidden_weights: int) -> float:
    """The share of a recurrent layer's MACs in its hidden-to-hidden weights (W_hh: they run
    step by step), from the element counts of its input (W_ih) and hidden weights."""
    total = input_weights + hidden_weights
    return hidden_weights / total if total else 1.0


def rnn_recurrent_share(name: str, args: Sequence[Any]) -> float:
    """The share of a fused recurrent op's MACs in its hidden-to-hidden weights (W_hh), which
    run step by step; the rest (W_ih) is one projection of all tokens at once."""
    if name == "mkldnn_rnn_layer":
        mats = [a for a in args[1:3] if isinstance(a, torch.Tensor)]
    else:  # per layer and direction: W_ih, W_hh, then biases (1-D)
        ws = args[1] if name in ("_cudnn_rnn", "miopen_rnn") else (args[2] if len(args) > 2
                                                                    else ())
        mats = [w for w in ws if isinstance(w, torch.Tensor) and w.dim() == 2] \
            if isinstance(ws, (list, tuple)) else []
    total = sum(w.numel() for w in mats)
    rec = sum(w.numel() for w in mats[1::2])
    return recurrent_share(total - rec, rec)
