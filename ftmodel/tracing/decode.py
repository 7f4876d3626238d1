"""Inputs of one decode step of a causal language model with a KV cache.

``decode(context=1024)`` is an input specification (``inputs=`` of ``predict_latency``) for a
Hugging Face causal LM: each of ``batch`` sequences already holds ``context`` tokens in its KV
cache and the step computes one new token per sequence. The batch is the number of concurrent
sequences. What one step runs:

* ``input_ids`` of shape (batch, 1), ``attention_mask`` over ``context + 1`` positions, the new
  token's ``position_ids`` and ``cache_position``;
* the cache: ``"dynamic"`` (``transformers.DynamicCache``, the default of ``generate``): keys and
  values of shape (batch, KV heads, context, head dim) per layer, to which the step appends one
  position; ``"static"`` (``StaticCache``, what serving with CUDA graphs or torch.compile uses):
  buffers of ``context + 1`` positions updated in place at ``cache_position``.

The cache's tensors take the prediction's dtype (the model's parameters' where none is given).
Built on fake tensors like everything the tracer sees, so a model built on the meta device works.
Prefill is the whole-sequence forward: predict it with ordinary ``input_ids`` inputs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from ftmodel.errors import InvalidArgumentError

__all__ = ["CACHES", "DecodeInputs", "decode"]

CACHES = ("dynamic", "static")


@dataclass(frozen=True)
class DecodeInputs:
    """One decode step at ``context`` cached tokens per sequence (see :func:`decode`)."""

    context: int
    cache: str = "dynamic"

    def for_model(self, model: nn.Module, batch: int, dtype: torch.dtype | None = None
                  ) -> dict[str, Any]:
        """The forward's keyword arguments for ``batch`` sequences of ``model``."""
        cfg: Any = getattr(model, "config", None)
        dims = _cache_dims(cfg, model)
        layers, kv_heads, head_dim = dims
        dt = dtype or _float_dtype(model)
        ctx = self.context
        import transformers

        if self.cache == "static":
            cache: Any = transformers.StaticCache(cfg, max_cache_len=ctx + 1)
        else:
            shape = (batch, kv_heads, ctx, head_dim)
            cache = transformers.DynamicCache(
                [(torch.zeros(shape, dtype=dt), torch.zeros(shape, dtype=dt))
                 for _ in range(layers)], config=cfg)
        return {"input_ids": torch.zeros(batch, 1, dtype=torch.long),
                _cache_keyword(model): cache,
                "attention_mask": torch.ones(batch, ctx + 1, dtype=torch.long),
                "position_ids": torch.full((batch, 1), ctx, dtype=torch.long),
                "cache_position": torch.tensor([ctx]),
                "use_cache": True}


def decode(context: int, cache: str = "dynamic") -> DecodeInputs:
    """An input specification for one decode step with ``context`` tokens already cached."""
    if isinstance(context, bool) or not isinstance(context, int) or context < 1:
        raise InvalidArgumentError(f"context must be an integer >= 1 (tokens already in the KV "
                                   f"cache), got {context!r}; e.g. decode(context=1024)")
    if cache not in CACHES:
        raise InvalidArgumentError(f"cache must be one of {', '.join(CACHES)}, got {cache!r}")
    return DecodeInputs(context, cache)


def _cache_dims(cfg: Any, model: nn.Module) -> tuple[int, int, int]:
    """(layers, KV heads, head dim) from a Hugging Face config."""
    try:
        layers = int(cfg.num_hidden_layers)
        heads = int(cfg.num_attention_heads)
        kv_heads = int(getattr(cfg, "num_key_value_heads", None) or heads)
        head_dim = int(getattr(cfg, "head_dim", None) or cfg.hidden_size // heads)
    except (AttributeError, TypeError) as err:
        raise InvalidArgumentError(
            f"decode() inputs need a Hugging Face causal LM (a model with a .config giving "
            f"num_hidden_layers, num_attention_heads and hidden_size); "
            f"{type(model).__name__} has {'no config' if cfg is None else 'a config without them'}"
            "; for other decoders pass their step's inputs yourself") from err
    return layers, kv_heads, head_dim


def _cache_keyword(model: nn.Module) -> str:
    """``cache`` where the forward takes it (newer transformers), else ``past_key_values``."""
    import inspect

    params = inspect.signature(model.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


def _float_dtype(model: nn.Module) -> torch.dtype:
    for p in model.parameters():
        if p.is_floating_point():
            return p.dtype
    return torch.get_default_dtype()
