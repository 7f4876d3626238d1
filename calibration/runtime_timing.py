"""A runtime's own timing of one op sample, for the framework curves of
:mod:`ftmodel.calibration.framework_ops`: a TorchScript graph's instruction time from
torch.profiler (its prepacked oneDNN convolutions are not recorded ops), and the share of an
ONNX Runtime session's node time its profiler gives the sample's main node.
"""

from __future__ import annotations

import json
import math
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

from ftmodel.calibration.ops import OpSample
from ftmodel.speed import at_nominal_speed

__all__ = ["ort_node_share", "ts_conv_time_s", "ts_node_time_s"]


def _warm_reps(run: Callable[[], object], target_s: float, max_reps: int) -> int:
    """Runs ``run`` four times (warm-up, then one timed call) and returns how many calls fill
    about ``target_s`` (5 to ``max_reps``)."""
    for _ in range(3):
        run()
    t0 = time.perf_counter()
    run()
    return int(max(5, min(max_reps, target_s / max(time.perf_counter() - t0, 1e-6))))


def ts_node_time_s(run: Callable[[], object], *, target_s: float = 0.04,
                   max_reps: int = 40) -> float | None:
    """Median time per call that torch.profiler gives a TorchScript graph's own instructions
    (the ``forward`` event's self time): the ops the profiler records (``aten::to_mkldnn``,
    ``aten::to_dense`` and other aten kernels) are excluded, ``prim::`` ops such as oneDNN's
    prepacked ``prim::mkldnn_convolution`` (not recorded) and the interpreter's own work are
    included. None when the profile has no such event."""
    from ftmodel.frameworks._common import silenced_output

    with torch.no_grad():
        reps = _warm_reps(run, target_s, max_reps)
        with silenced_output():  # the profiler's backend logs its start and stop to stderr
            with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
                for _ in range(reps):
                    with torch.profiler.record_function("ftmodel_call"):
                        run()
    per_call: list[float] = []
    calls = [e for e in prof.events() if e.name == "ftmodel_call"]
    for call in calls:
        fwd = [c for c in call.cpu_children if c.name == "forward"]
        if fwd:
            per_call.append(sum(f.self_cpu_time_total for f in fwd) * 1e-6)
    return statistics.median(per_call) if per_call else None


def ts_conv_time_s(sample: OpSample, batch: int) -> float | None:
    """A convolution sample's time inside a frozen TorchScript graph, its input already in
    oneDNN's blocked layout as a model's previous convolution leaves it: the graph's own
    instruction time (:func:`ts_node_time_s`) of a 1x1 convolution followed by the sample,
    less that of the 1x1 convolution alone. Run alone, the sample's convolution would also
    reorder its plain input, which in a model only the first one does."""
    from ftmodel.frameworks import torchscript as ts

    x = sample.inputs[0]
    if x.dim() != 4:
        return None
    torch.manual_seed(0)
    pre = nn.Conv2d(int(x.shape[1]), int(x.shape[1]), 1, bias=False).eval().requires_grad_(False)
    both = nn.Sequential(pre, sample.module).eval()
    run_both, run_pre = ts.runner(both, sample.inputs, batch), ts.runner(pre, sample.inputs, batch)
    t_both = at_nominal_speed(lambda: ts_node_time_s(run_both) or math.nan)
    t_pre = at_nominal_speed(lambda: ts_node_time_s(run_pre) or math.nan)
    if math.isnan(t_both) or math.isnan(t_pre):
        return None
    return max(t_both - t_pre, 1e-9)


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
