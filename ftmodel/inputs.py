"""Input specifications for ``inputs=`` beyond tensors, tuples, dicts and callables.

* :func:`decode` — one decode step of a Hugging Face causal LM with a KV cache of ``context``
  tokens per sequence; the batch is the number of concurrent sequences, and each Prediction
  reports ``tokens_per_s`` (see :mod:`ftmodel.tracing.decode`)::

      ps = ftmodel.predict_latency(llm, "cudagraphs", "h100", [1, 8, 64],
                                   inputs=ftmodel.inputs.decode(context=1024), dtype="fp16")
      ps[0].latency_s, ps[0].tokens_per_s
"""

from __future__ import annotations

from ftmodel.tracing.decode import CACHES, DecodeInputs, decode

__all__ = ["CACHES", "DecodeInputs", "decode"]
