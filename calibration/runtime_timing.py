"""A runtime's own timing of one op sample, for the framework curves of
:mod:`ftmodel.calibration.framework_ops`: the prepacked oneDNN convolution TorchScript's frozen
graph runs, called as a model calls it (on a blocked input), and the share of an ONNX
Runtime session's node time its profiler gives the sample's main node; and the chains of the
cache probe (:mod:`ftmodel.calibration.cache`) run as a runtime's sessions
(:data:`RUNTIME_CHAINS`).
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ftmodel.calibration.cache import ChainRunner, fit_runtime_cache, probe_runtime_cache
from ftmodel.calibration.op_sample import OpSample
from ftmodel.frameworks.base import get_framework

__all__ = ["ORT_SHARE_PASSES", "RUNTIME_CHAINS", "ort_chain", "ort_node_share", "ort_node_shares",
           "runtime_cache_stage", "ts_prepacked_conv"]


def ort_chain(net: nn.Module, x: torch.Tensor) -> Callable[[], object]:
    """A run of an ONNX Runtime session made from ``net`` on ``x`` (exported and optimized as
    :mod:`ftmodel.frameworks.onnxruntime` does for a model; its weights packed then, once)."""
    from ftmodel.frameworks import onnxruntime as ort_fw

    return ort_fw.build(net, (x,), int(x.shape[0])).run


# frameworks whose cache probe runs through their own runtime (ftmodel.calibration.cache):
# ONNX Runtime streams weights it packed once, not as eager's libraries do on every call
RUNTIME_CHAINS: dict[str, ChainRunner] = {"onnxruntime": ort_chain}


def runtime_cache_stage(framework: str, llc_bytes: int, quick: bool, rounds: int,
                        shared: Mapping[str, float], provenance: dict[str, Any]
                        ) -> dict[str, float]:
    """The cache probe run through ``framework``'s runtime
    (:func:`ftmodel.calibration.cache.probe_runtime_cache`); its raw probe goes into the
    provenance (``framework_cache_probes``), its fit (with the shared probe's stream share,
    from ``shared``, the profile's cache mapping) is returned under ``<framework>/`` keys
    (empty when the chains never slowed down)."""
    probe = probe_runtime_cache(RUNTIME_CHAINS[framework], llc_bytes, rounds=rounds,
                                quick=quick, settle_s=get_framework(framework).settle_s)
    provenance["framework_cache_probes"] = {
        **provenance.get("framework_cache_probes", {}), framework: probe}
    fit = fit_runtime_cache(probe, float(shared.get("stream_share", 0.0)))
    return {f"{framework}/{k}": v for k, v in fit.items()}


def _warm_reps(run: Callable[[], object], target_s: float, max_reps: int) -> int:
    """Runs ``run`` four times (warm-up, then one timed call) and returns how many calls fill
    about ``target_s`` (5 to ``max_reps``)."""
    for _ in range(3):
        run()
    t0 = time.perf_counter()
    run()
    return int(max(5, min(max_reps, target_s / max(time.perf_counter() - t0, 1e-6))))


def ts_prepacked_conv(sample: OpSample, plain: bool = False
                      ) -> Callable[[], torch.Tensor] | None:
    """A call of the oneDNN convolution TorchScript's frozen graph runs for a 2-d convolution
    sample, as a model runs it: its weights reordered once, as ``optimize_for_inference``
    reorders them (``mkldnn_reorder_conv2d_weight``), and its input already in oneDNN's
    blocked layout, as a previous convolution leaves it (a 1x1 depthwise convolution of unit
    weights, run once: the values stay the sample's input), or with ``plain`` in the plain
    layout ``aten::to_mkldnn`` leaves, which oneDNN reorders inside the call. The call is
    ``at::native::mkldnn_convolution``, the function ``prim::mkldnn_convolution`` calls
    (torch/csrc/jit/passes/frozen_ops_to_mkldnn.cpp), reached through eager dispatch; its
    output stays blocked. None for a sample that is not an ``nn.Conv2d`` on a 4-d input.

    Why not a frozen graph: a graph of the sample alone also reorders its plain input and its
    output, and the difference between the sample behind another convolution and that
    convolution alone leaves the difference of their output reorders in, which the copy
    curves price only roughly: a 96->16 1x1 convolution on a 112x112 map read 11 us that way
    on the EPYC, and a 16->96 one at batch 4 on 56x56 1.5x its kernel's time."""
    conv = sample.module
    x = sample.inputs[0]
    if not isinstance(conv, nn.Conv2d) or x.dim() != 4 or isinstance(conv.padding, str):
        return None
    padding, stride = list(conv.padding), list(conv.stride)
    dilation, groups = list(conv.dilation), conv.groups
    channels = int(x.shape[1])
    with torch.no_grad():
        weight = torch._C._nn.mkldnn_reorder_conv2d_weight(
            conv.weight.detach().float().to_mkldnn(), padding, stride, dilation, groups)
        bias = conv.bias.detach().float().to_mkldnn() if conv.bias is not None else None
        blocked = x.float().to_mkldnn() if plain else torch.mkldnn_convolution(
            x.float().to_mkldnn(), torch.ones(channels, 1, 1, 1).to_mkldnn(), None, [0, 0],
            [1, 1], [1, 1], channels)

    def run() -> torch.Tensor:
        out: torch.Tensor = torch.mkldnn_convolution(blocked, weight, bias, padding, stride,
                                                     dilation, groups)
        return out

    return run


def ort_node_share(sample: OpSample, batch: int, op_type: str, *, target_s: float = 0.04,
                   max_reps: int = 40) -> float | None:
    """The share of a session's node time that ONNX Runtime's own profiler gives the sample's
    main node (``op_type``, e.g. ``Conv``; the slowest node of that type if there are several),
    medians over repeated runs of a profiling session built for it; None when the profile has
    no such node. Layout reorders and casts around the op are other nodes, outside the share.

    Only the share is used, not the node's time: profiling slows the nodes it times by
    several microseconds each and unevenly (on the EPYC a 4096x4096 GEMV's node took 1.8x its
    unprofiled session, a batch-16 one 0.7x), so the share divides the wall-clock time of the
    unprofiled session."""
    from ftmodel.frameworks import onnxruntime as ort_fw

    with tempfile.TemporaryDirectory(prefix="ftmodel-ortprof-") as tmp:
        art = ort_fw.build(sample.module, sample.inputs, batch, None, enable_profiling=True,
                           profile_dir=tmp)
        reps = _warm_reps(art.run, target_s, max_reps)
        for _ in range(reps):
            art.run()
        events = json.loads(Path(art.session.end_profiling()).read_text())
    durs: dict[str, list[float]] = {}
    main: set[str] = set()
    for e in events:
        if e.get("cat") == "Node" and str(e.get("name", "")).endswith("_kernel_time"):
            durs.setdefault(e["name"], []).append(float(e["dur"]) * 1e-6)
            if e.get("args", {}).get("op_name") == op_type:
                main.add(e["name"])
    if not main:
        return None
    medians = {name: statistics.median(v) for name, v in durs.items()}
    total_s = sum(medians.values())
    if total_s <= 0.0:
        return None
    return max(medians[name] for name in main) / total_s


# profiled sessions per sample whose shares' median an ONNX Runtime curve uses: a single
# profiled run of about 40 ms set each share, and a calibration of the 2-vCPU AMD EPYC Zen 4
# guest recorded a tenth of its convolution samples' shares 0.82x or less of what three later
# passes agreed on within 0.94-1.16 (P10-P90), one at 0.38x (benchmarks/ort_conv_shares.py)
ORT_SHARE_PASSES = 3


def ort_node_shares(samples: Sequence[tuple[OpSample, int, str]],
                    passes: int = ORT_SHARE_PASSES) -> dict[str, list[float]]:
    """:func:`ort_node_share` of each ``(sample, batch, op type)``, ``passes`` times: every
    sample once per pass, pass after pass, so that a slow moment of the machine sets one of a
    sample's shares, not all. Per sample label, the shares that came out (none where the
    profile had no such node)."""
    got: dict[str, list[float]] = {s.label: [] for s, _, _ in samples}
    for _ in range(passes):
        for sample, batch, op_type in samples:
            share = ort_node_share(sample, batch, op_type)
            if share is not None:
                got[sample.label].append(share)
    return got
