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

On a CPU a third chain, of convolutions (``nn.Conv2d(512, 512, 3)`` on a 3x3 map, 9 MiB of
weights each, :data:`EAGER_CONV_BATCH` images a call so that eager runs oneDNN's convolution),
tells what such a convolution pays streaming its weights: its penalty per byte over its hot
layer, divided by what the GEMM chains charge a layer of that size, is ``conv_ratio``. A
compute-bound convolution streams its weights in the shadow of its MACs: on the 2-vCPU AMD EPYC
(Zen 5) a chain of them paid 12 ps a byte over the layer hot (+110 µs on 0.72 ms), where the
GEMM chains charge a 9 MiB layer 38 and the narrow layers' price, which eager's convolutions
paid without the chain, is 66 (ResNet-34's last stage at batch 4 was predicted at 1.5x what it
ran).

A framework whose runtime streams weights its own way is probed through that runtime
(:func:`probe_runtime_cache`): the same chains, made its sessions, and a third chain of
convolutions (``nn.Conv2d(512, 512, 3)`` on a 3x3 map, 9 MiB of weights each), whose penalty per
byte over its hot layer, divided by what the GEMM chains charge a layer of that size, is
``conv_ratio``. :func:`fit_runtime_cache` fits it; the profile stores it under ``<framework>/``
keys of its cache mapping (:meth:`ftmodel.estimate.cache.CacheModel.from_params`). On the
2-vCPU AMD EPYC, ONNX Runtime (whose weights are packed once, when the session is made) ran a
chain of 1 MiB layers at 26-32 µs per layer where eager took 104, a chain of 16 MiB ones at
320-424 µs per layer where eager took 840, and a chain of 9 MiB convolutions at 0.47 ms per
layer where eager's, which re-order their weights on every call, took 4.0 ms.

The grid's longest chain holds 3x the last-level cache, less where memory is short: on a CPU the
chains alive at once stay within :data:`CHAIN_MEMORY_SHARE` of the memory available when the
probe starts, a quick calibration stops at :data:`QUICK_CHAIN_BYTES`, and a runtime's sessions
(each with copies of its chain's weights) are built and timed a few at a time
(:mod:`ftmodel.calibration.chunks`). A VM reporting a 480 MiB cache had made chains of up to
1.4 GB, and ONNX Runtime's sessions of them outgrew its 23 GB of memory.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch
from torch import nn

from ftmodel.calibration.chunks import time_in_chunks
from ftmodel.estimate.cache import CacheModel
from ftmodel.machine import available_memory_bytes
from ftmodel.measure import Measurement, measure_cold_interleaved, measure_interleaved

__all__ = ["CONV_LAYER_BYTES", "EAGER_CONV_BATCH", "LAYER_BYTES", "ChainRunner", "fit_cache_model",
           "fit_runtime_cache", "probe_cache", "probe_runtime_cache"]

_WIDTH = 512
LAYER_BYTES = _WIDTH * _WIDTH * 4  # 1 MiB of fp32 weights per layer (the bias is negligible)
_WIDE_WIDTH = 2048  # 16 MiB per wide layer, less where half the cache is smaller
_CONV_CHANNELS, _CONV_MAP = 512, 3  # the convolution chain's layers: 512 -> 512, 3x3, on 3x3
CONV_LAYER_BYTES = _CONV_CHANNELS * _CONV_CHANNELS * 9 * 4  # 9 MiB of fp32 weights per layer
# images per call of eager's convolution chain: at batch 1 a 3x3 map runs as im2col and one GEMM
# (ATen's slow2d, priced as a GEMM streams), from batch 4 on as oneDNN's convolution, which
# re-orders its weights on every call (ftmodel.tracing.variants.conv_variant)
EAGER_CONV_BATCH = 4

# makes a runtime's session from a chain and its input; returns one call of it
ChainRunner = Callable[[nn.Module, torch.Tensor], Callable[[], object]]


def _chain(n: int, device: str, width: int = _WIDTH) -> nn.Module:
    torch.manual_seed(n)
    return nn.Sequential(*[nn.Linear(width, width) for _ in range(n)]).to(device).eval()


def _conv_chain(n: int, device: str) -> nn.Module:
    torch.manual_seed(n)
    return nn.Sequential(*[nn.Conv2d(_CONV_CHANNELS, _CONV_CHANNELS, 3, padding=1)
                           for _ in range(n)]).to(device).eval()


def _wide_width(llc_bytes: int) -> int:
    """The wide layers' width: 2048 (16 MiB of fp32 weights), or the largest multiple of 256
    whose layer fits in half the cache (its hot time must be an in-cache one)."""
    fits = int((max(llc_bytes, 8 << 20) / 2 / 4) ** 0.5) // 256 * 256
    return max(2 * _WIDTH, min(_WIDE_WIDTH, fits))


def probe_cache(device: str, flush: Callable[[], object], llc_bytes: int, *,
                rounds: int = 5, quick: bool = False) -> dict[str, Any]:
    """Time the layer chains in eager mode; returns the raw probe (grid, per-layer times, hot,
    cold). On a CPU, also the convolution chain (:data:`EAGER_CONV_BATCH` images a call, so
    that eager runs oneDNN's convolution), hot and streaming, for ``conv_ratio``: on the 2-vCPU
    AMD EPYC (Zen 5) a chain of them ran +110 µs a layer over the layer hot (0.72 ms), 12 ps a
    byte, where the narrow layers' price inside a chain was 66."""
    # alive at once: every chain of the grid, the wide one and the convolutions (CPU), each as
    # long as the longest
    copies = sum(_QUICK_GRID if quick else _FULL_GRID) + (2.0 if device == "cpu" else 1.0)
    grid, width, n_wide, n_conv = _chain_sizes(
        llc_bytes, quick, _max_chain_bytes(copies) if device == "cpu" else None)
    x = torch.randn(1, _WIDTH, device=device)
    xw = torch.randn(1, width, device=device)
    xc = torch.randn(EAGER_CONV_BATCH, _CONV_CHANNELS, _CONV_MAP, _CONV_MAP, device=device)
    with torch.no_grad():
        one, wide_one, wide = _chain(1, device), _chain(1, device, width), _chain(n_wide, device, width)
        fns: dict[Any, Callable[[], object]] = {"hot": lambda: one(x)}
        chains = {n: _chain(n, device) for n in grid}
        for n, net in chains.items():
            fns[n] = (lambda m: lambda: m(x))(net)
        fns["wide_hot"] = lambda: wide_one(xw)
        fns["wide"] = lambda: wide(xw)
        res = measure_interleaved(fns, device=device, rounds=rounds, round_s=0.03)
        if device == "cpu":  # a ratio of ~1 ms calls a tenth apart: longer and more rounds
            conv_one, conv = _conv_chain(1, device), _conv_chain(n_conv, device)
            res.update(measure_interleaved(
                {"conv_hot": lambda: conv_one(xc), "conv": lambda: conv(xc)}, device=device,
                rounds=rounds + 2, warmup=5, round_s=0.1))
        cold = measure_cold_interleaved({"cold": fns["hot"]}, flush=flush, device=device,
                                        rounds=rounds, reps=9)["cold"].time_s
    per_layer = {n: res[n].time_s / n for n in grid}
    probe: dict[str, Any] = {"layer_bytes": LAYER_BYTES, "grid_layers": grid,
                             "per_layer_s": [per_layer[n] for n in grid],
                             "hot_s": res["hot"].time_s, "cold_s": cold,
                             "wide_layer_bytes": width * width * 4, "wide_layers": n_wide,
                             "wide_per_layer_s": res["wide"].time_s / n_wide,
                             "wide_hot_s": res["wide_hot"].time_s}
    if "conv" in res:
        probe.update({"conv_layer_bytes": CONV_LAYER_BYTES, "conv_layers": n_conv,
                      "conv_batch": EAGER_CONV_BATCH,
                      "conv_per_layer_s": res["conv"].time_s / n_conv,
                      "conv_hot_s": res["conv_hot"].time_s})
    return probe


def probe_runtime_cache(runner: ChainRunner, llc_bytes: int, *, rounds: int = 5,
                        quick: bool = False, settle_s: float = 0.0) -> dict[str, Any]:
    """Time the layer chains and the convolution chain as a runtime's sessions (``runner``
    makes one from a chain; CPU only), ``settle_s`` apart (its worker threads spin after a
    run). Each time is the session's less its per-run floor (a session of one 4x4 layer):
    a runtime's ``run`` costs microseconds of its own that a one-layer session would count as
    the layer's. No flushed call: a runtime whose threads sleep through the flush times their
    wake-up (:func:`fit_runtime_cache` takes the shared probe's stream share instead)."""
    grid, width, n_wide, n_conv = _chain_sizes(llc_bytes, quick,
                                               _max_chain_bytes(RUNTIME_CHAIN_COPIES))
    x, xw = torch.randn(1, _WIDTH), torch.randn(1, width)
    xc = torch.randn(1, _CONV_CHANNELS, _CONV_MAP, _CONV_MAP)
    chains: list[tuple[Any, Callable[[], nn.Module], torch.Tensor]] = [
        *((n, functools.partial(_chain, n, "cpu"), x) for n in grid),
        ("wide_hot", functools.partial(_chain, 1, "cpu", width), xw),
        ("wide", functools.partial(_chain, n_wide, "cpu", width), xw),
        ("conv_hot", functools.partial(_conv_chain, 1, "cpu"), xc),
        ("conv", functools.partial(_conv_chain, n_conv, "cpu"), xc)]
    less_floor = _runtime_chain_times(runner, chains, rounds=rounds, settle_s=settle_s)
    floor = less_floor.pop("floor")
    return {"layer_bytes": LAYER_BYTES, "grid_layers": grid, "floor_s": floor,
            "per_layer_s": [less_floor[n] / n for n in grid], "hot_s": less_floor["hot"],
            "wide_layer_bytes": width * width * 4, "wide_layers": n_wide,
            "wide_per_layer_s": less_floor["wide"] / n_wide, "wide_hot_s": less_floor["wide_hot"],
            "conv_layer_bytes": CONV_LAYER_BYTES, "conv_layers": n_conv,
            "conv_per_layer_s": less_floor["conv"] / n_conv, "conv_hot_s": less_floor["conv_hot"]}


def _runtime_chain_times(runner: ChainRunner,
                         chains: list[tuple[Any, Callable[[], nn.Module], torch.Tensor]], *,
                         rounds: int, settle_s: float) -> dict[Any, float]:
    """Each chain's session time less the per-run floor (a session of one 4x4 layer) timed in
    the same rounds, key -> seconds (``"floor"``: the floor's own time, ``"hot"``: one layer's,
    both from the first rounds). The sessions copy their chains' weights (on a VM reporting a
    480 MiB cache, chains up to 3x that, the longest 1.4 GB, outgrew its 23 GB all at once),
    so they are built and timed in chunks that fit this machine's memory
    (:func:`ftmodel.calibration.chunks.time_in_chunks`), each with the floor and the one-layer
    chain."""
    with torch.no_grad():
        fixed: dict[Any, Callable[[], object]] = {
            "floor": runner(_chain(1, "cpu", 4), torch.randn(1, 4)),
            "hot": runner(_chain(1, "cpu"), torch.randn(1, _WIDTH))}

    def sessions() -> Iterator[tuple[Any, Callable[[], object]]]:
        for key, make, inp in chains:
            with torch.no_grad():
                yield key, runner(make(), inp)

    def measure(fns: dict[Any, Callable[[], object]]) -> dict[Any, Measurement]:
        with torch.no_grad():
            return measure_interleaved(fns, rounds=rounds, round_s=0.03, settle_s=settle_s)

    timed = time_in_chunks(fixed, sessions(), measure)
    out = {key: max(m.time_s - with_fixed["floor"].time_s, 0.0)
           for key, (m, with_fixed) in timed.items()}
    out["floor"] = timed["floor"][0].time_s
    return out


_FULL_GRID = (0.03, 0.08, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.5, 0.6, 0.8, 1.0)
_QUICK_GRID = (0.05, 0.15, 0.3, 0.45, 0.6, 0.8, 1.0)
QUICK_CHAIN_BYTES = 256 << 20  # a quick calibration's longest chain, at most
# the share of the memory available when a probe starts that its chains may take: eager's all
# at once (the grid's chains and the wide one), a runtime's one chain at a time through the
# copies its export and session make (RUNTIME_CHAIN_COPIES of its weights at the peak: 5.1 GB
# for a 0.75 GB chain through ONNX Runtime, 6.7x, on the Intel Xeon VM)
CHAIN_MEMORY_SHARE = 0.35
RUNTIME_CHAIN_COPIES = 7.0


def _chain_sizes(llc_bytes: int, quick: bool, max_bytes: int | None = None
                 ) -> tuple[list[int], int, int, int]:
    """The narrow chains' lengths (up to 3x the cache, at most ``max_bytes`` of weights and, in
    a quick calibration, :data:`QUICK_CHAIN_BYTES`), the wide layers' width, and how many wide
    and convolution layers make a chain as long (in bytes) as the longest narrow one."""
    top_bytes = 3 * max(llc_bytes, 8 << 20)  # up to 3× the cache
    if quick:
        top_bytes = min(top_bytes, QUICK_CHAIN_BYTES)
    if max_bytes is not None:
        top_bytes = min(top_bytes, max_bytes)
    top = max(8, int(top_bytes / LAYER_BYTES))
    grid = sorted({max(1, int(round(top * q))) for q in (_QUICK_GRID if quick else _FULL_GRID)})
    width = _wide_width(llc_bytes)
    longest = grid[-1] * LAYER_BYTES
    return (grid, width, max(2, -(-longest // (width * width * 4))),
            max(2, -(-longest // CONV_LAYER_BYTES)))


def _max_chain_bytes(copies: float) -> int | None:
    """The longest chain's weights that keep ``copies`` of them within
    :data:`CHAIN_MEMORY_SHARE` of the memory available now (None where it is not known)."""
    available = available_memory_bytes()
    return None if available is None else int(available * CHAIN_MEMORY_SHARE / copies)


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
    ramp = _ramp_fit(n * float(probe["layer_bytes"]), share, 1.0)
    if ramp is None:
        return {}
    lo, hi, eta = ramp
    out = {"lo_bytes": lo, "hi_bytes": hi, "stream_share": eta,
           "cold_s_per_byte": (cold - hot) / float(probe["layer_bytes"])}
    out.update(_wide_ratio(probe, eta * out["cold_s_per_byte"]))
    out.update(_conv_ratio(probe, out))
    return out


def fit_runtime_cache(probe: dict[str, Any], stream_share: float) -> dict[str, float]:
    """The cache model of a runtime from :func:`probe_runtime_cache`: ``lo_bytes``, ``hi_bytes``
    and the in-chain penalty ``A`` of its narrow layers from ``t_n − t_hot = A · φ(n MiB)``;
    ``stream_share`` is the shared probe's (how much of a flushed call's penalty a layer pays
    streaming inside a chain is the memory's doing, and the runtime's flushed call cannot be
    timed), so ``cold_s_per_byte = A / (stream_share · layer bytes)``; ``wide_ratio`` and
    ``conv_ratio`` from its wide and convolution chains. Empty when its chains never slowed
    down or ``stream_share`` is not positive."""
    if stream_share <= 0.0:
        return {}
    n = np.asarray(probe["grid_layers"], dtype=float)
    layer = float(probe["layer_bytes"])
    excess = np.maximum(np.asarray(probe["per_layer_s"], dtype=float) - float(probe["hot_s"]),
                        0.0)
    ramp = _ramp_fit(n * layer, excess, None)
    if ramp is None or ramp[2] <= 0.0:
        return {}
    lo, hi, amp = ramp
    out = {"lo_bytes": lo, "hi_bytes": hi, "stream_share": float(stream_share),
           "cold_s_per_byte": amp / (float(stream_share) * layer)}
    out.update(_wide_ratio(probe, amp / layer))
    out.update(_conv_ratio(probe, out))
    return out


def _ramp_fit(size: np.ndarray, y: np.ndarray, cap: float | None
              ) -> tuple[float, float, float] | None:
    """``y ≈ a · φ(size)`` with ``φ`` ramping from 0 at ``lo`` to 1 at ``hi`` (both among the
    sizes, or 0): grid search over lo/hi, least squares for ``a`` (within 0 and ``cap``);
    (lo, hi, a), None when no ramp fits."""
    best: tuple[float, float, float, float] | None = None
    candidates = np.unique(np.concatenate([[0.0], size]))
    for lo in candidates:
        for hi in candidates[candidates > lo]:
            phi = np.clip((size - lo) / (hi - lo), 0.0, 1.0)
            denom = float(phi @ phi)
            if denom == 0:
                continue
            a = max(float(phi @ y / denom), 0.0)
            if cap is not None:
                a = min(a, cap)
            err = float(((a * phi - y) ** 2).sum())
            if best is None or err < best[0]:
                best = (err, float(lo), float(hi), a)
    return None if best is None else best[1:]


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


def _conv_ratio(probe: dict[str, Any], fit: dict[str, float]) -> dict[str, float]:
    """``conv_ratio`` of the cache model from the probe's convolution chain (nothing for a
    probe without one): its layers' penalty per byte over their hot layer, over what the GEMM
    chains' fit (``fit``) charges a layer of that size once it streams, within 0.05-4."""
    conv_bytes = float(probe.get("conv_layer_bytes", 0.0))
    if conv_bytes <= 0.0:
        return {}
    model = CacheModel(fit["lo_bytes"], fit["hi_bytes"], fit["stream_share"],
                       fit["cold_s_per_byte"], fit.get("narrow_bytes", 0.0),
                       fit.get("wide_bytes", 0.0), fit.get("wide_ratio", 1.0))
    gemm = model.stream_share * float(model.cold_s_per_byte_at(np.array([conv_bytes]))[0])
    if gemm <= 0.0:
        return {}
    conv = (float(probe["conv_per_layer_s"]) - float(probe["conv_hot_s"])) / conv_bytes
    return {"conv_ratio": float(np.clip(conv / gemm, 0.05, 4.0))}
