"""The cache probe: when do a model's weights stop fitting in cache, and what does that cost?

A chain of ``n`` distinct ``nn.Linear(512, 512)`` layers (1 MiB of weights each) runs on a single
input row, so each layer streams its weights once per forward pass and does little else. With
``n`` MiB of weights in all, a layer's weights were last touched ``n`` MiB ago (one pass). For a
grid of ``n`` that spans the last-level cache, the time per layer ``t_n`` is compared with one
layer hot (``t_hot``, the same weights over and over) and right after a cache flush (``t_cold``):
``share(n) = (t_n − t_hot) / (t_cold − t_hot)``. The fit is the cache model of
:mod:`ftmodel.estimate.cache`: ``share(n) = stream_share · φ(n MiB)`` with ``φ`` ramping from 0 at
``lo_bytes`` to 1 at ``hi_bytes`` (a grid search over lo/hi, least squares for stream_share).
Nothing here is model-specific: it measures the memory hierarchy as layers see it.

A second chain, of wide layers (``nn.Linear(2048, 2048)``, 16 MiB each, fewer where the cache is
small) as long as the longest narrow one, tells how the streaming cost per byte depends on a
layer's size: a large weight matrix streams at close to the memory's bandwidth, where each
small layer of a chain also pays a fixed cost (on 2-vCPU VMs the 1 MiB layers streamed at 14 GB/s
on the AMD EPYC and 24 GB/s on the Intel Xeon beyond their hot time, where the corpus's 16 MiB
layers ran at 30 and 46 GB/s in all). ``wide_ratio`` is the wide chain's penalty per byte over
its hot layer, divided by the narrow chain's once it streams (``stream_share · (t_cold − t_hot)``
per byte).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch import nn

from ftmodel.measure import measure_cold_interleaved, measure_interleaved

__all__ = ["probe_cache", "fit_cache_model", "LAYER_BYTES"]

_WIDTH = 512
LAYER_BYTES = _WIDTH * _WIDTH * 4  # 1 MiB of fp32 weights per layer (the bias is negligible)
_WIDE_WIDTH = 2048  # 16 MiB per wide layer, less where half the cache is smaller


def _chain(n: int, device: str, width: int = _WIDTH) -> nn.Module:
    torch.manual_seed(n)
    return nn.Sequential(*[nn.Linear(width, width) for _ in range(n)]).to(device).eval()


def _wide_width(llc_bytes: int) -> int:
    """The wide layers' width: 2048 (16 MiB of fp32 weights), or the largest multiple of 256
    whose layer fits in half the cache (its hot time must be an in-cache one)."""
    fits = int((max(llc_bytes, 8 << 20) / 2 / 4) ** 0.5) // 256 * 256
    return max(2 * _WIDTH, min(_WIDE_WIDTH, fits))


def probe_cache(device: str, flush: Callable[[], object], llc_bytes: int, *,
                rounds: int = 5, quick: bool = False) -> dict[str, Any]:
    """Time the layer chains; returns the raw probe (grid, per-layer times, hot, cold)."""
    top = max(8, int(3 * max(llc_bytes, 8 << 20) / LAYER_BYTES))  # up to 3× the cache
    grid = sorted({max(1, int(round(top * q))) for q in (
        (0.05, 0.15, 0.3, 0.45, 0.6, 0.8, 1.0) if quick else
        (0.03, 0.08, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.5, 0.6, 0.8, 1.0))})
    x = torch.randn(1, _WIDTH, device=device)
    one = _chain(1, device)
    width = _wide_width(llc_bytes)
    wide_bytes = width * width * 4
    n_wide = max(2, -(-grid[-1] * LAYER_BYTES // wide_bytes))  # as long as the longest chain
    xw = torch.randn(1, width, device=device)
    with torch.no_grad():
        fns: dict[Any, Callable[[], object]] = {"hot": lambda: one(x)}
        chains = {n: _chain(n, device) for n in grid}
        for n, net in chains.items():
            fns[n] = (lambda m: lambda: m(x))(net)
        wide_one, wide = _chain(1, device, width), _chain(n_wide, device, width)
        fns["wide_hot"] = lambda: wide_one(xw)
        fns["wide"] = lambda: wide(xw)
        res = measure_interleaved(fns, device=device, rounds=rounds, round_s=0.03)
        cold = measure_cold_interleaved({"cold": fns["hot"]}, flush=flush, device=device,
                                        rounds=rounds, reps=9)["cold"].time_s
    per_layer = {n: res[n].time_s / n for n in grid}
    return {"layer_bytes": LAYER_BYTES, "grid_layers": grid,
            "per_layer_s": [per_layer[n] for n in grid], "hot_s": res["hot"].time_s,
            "cold_s": cold, "wide_layer_bytes": wide_bytes, "wide_layers": n_wide,
            "wide_per_layer_s": res["wide"].time_s / n_wide,
            "wide_hot_s": res["wide_hot"].time_s}


def fit_cache_model(probe: dict[str, Any]) -> dict[str, float]:
    """lo_bytes, hi_bytes, stream_share of :class:`ftmodel.estimate.cache.CacheModel`, and
    ``cold_s_per_byte``: what the probe's layer paid per byte of weights after a flush beyond
    its hot time, ``(t_cold − t_hot) / layer bytes`` (the penalty a kernel on a hot-only curve
    is charged per cold byte, scaled by the same ``stream_share · φ``)."""
    n = np.asarray(probe["grid_layers"], dtype=float)
    t = np.asarray(probe["per_layer_s"], dtype=float)
    hot, cold = float(probe["hot_s"]), float(probe["cold_s"])
    if cold <= hot * 1.05:  # flushing made no difference: no cache effect to model
        return {}
    share = np.clip((t - hot) / (cold - hot), 0.0, 1.5)
    size = n * float(probe["layer_bytes"])
    best: tuple[float, float, float, float] | None = None
    candidates = np.unique(np.concatenate([[0.0], size]))
    for lo in candidates:
        for hi in candidates[candidates > lo]:
            phi = np.clip((size - lo) / (hi - lo), 0.0, 1.0)
            denom = float(phi @ phi)
            if denom == 0:
                continue
            eta = float(np.clip(phi @ share / denom, 0.0, 1.0))
            err = float(((eta * phi - share) ** 2).sum())
            if best is None or err < best[0]:
                best = (err, float(lo), float(hi), eta)
    if best is None:
        return {}
    _, lo, hi, eta = best
    out = {"lo_bytes": lo, "hi_bytes": hi, "stream_share": eta,
           "cold_s_per_byte": (cold - hot) / float(probe["layer_bytes"])}
    out.update(_wide_ratio(probe, eta * out["cold_s_per_byte"]))
    return out


def _wide_ratio(probe: dict[str, Any], narrow_per_byte: float) -> dict[str, float]:
    """``narrow_bytes``, ``wide_bytes``, ``wide_ratio`` of the cache model from the probe's wide
    chain (nothing for a probe without one): the wide layers' streaming penalty per byte over
    ``narrow_per_byte``, the narrow chain's once it streams, within 0.05-2."""
    wide_bytes = float(probe.get("wide_layer_bytes", 0.0))
    if wide_bytes <= float(probe["layer_bytes"]) or narrow_per_byte <= 0.0:
        return {}
    wide = (float(probe["wide_per_layer_s"]) - float(probe["wide_hot_s"])) / wide_bytes
    return {"narrow_bytes": float(probe["layer_bytes"]), "wide_bytes": wide_bytes,
            "wide_ratio": float(np.clip(wide / narrow_per_byte, 0.05, 2.0))}
