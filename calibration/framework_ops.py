"""Per-framework op curves: the same size sweeps as :mod:`ftmodel.calibration.ops`, run through a
compiled framework's own runtime (ONNX Runtime's MLAS and NCHWc kernels, TorchScript's frozen
and prepacked graph, inductor's generated C++ loops).

Why: a framework does not run the same kernels as eager PyTorch. On a CPU, ONNX Runtime's
arena allocator avoids the page faults an out-of-place eager op pays on a fresh 32 MB output,
its prepacked GEMM weights stay cached where eager's do not, and inductor's vectorised loops
beat aten's on small tensors. Shared eager curves mis-price all of that.

What is measured, per sample (one op at one size, from :func:`ftmodel.calibration.ops.op_samples`):
the framework's runner of the sample module, interleaved with its family's floor (the same op on
a few elements) run the same way, hot only (the runtimes' threads sleep through a cache flush,
see FRAMEWORK_SWEEPS). What is stored: a curve keyed
``<framework>/<curve>`` whose x-axis is the work of the *framework's* main kernel for the sample
(the kernel of the sample's op class with the most MACs, then bytes, in the framework's own
lowering) and whose time is ``total − floor − (the other kernels of that lowering, priced with
the shared curves)``: layout reorders and casts the runtime wraps around one op are separate
kernels in its lowering, priced on their own, so they are not folded into the op's curve (at
most half the sample's time is taken off for them: the shared curves price them only roughly).
ONNX Runtime: a single conv sample is NCHW in and out, so ORT wraps it in layout reorders that a
model's chain of NCHWc convs does not pay, and those can cost as much as the conv itself. Its
curve's time is ``total − floor`` split by the main node's share of the node time ORT's
profiler records (:func:`ort_node_share`; the median of three profiled sessions, taken pass after
pass over the samples). The profiler gives the share only, not the time: it
slows the nodes it times, by several microseconds each and unevenly.

TorchScript runs aten kernels, which the shared curves price, except its prepacked oneDNN
convolutions (``prim::mkldnn_convolution``): those get curves of their own, keyed by that op
(``torchscript/conv@mkldnn_convolution``), so its other convolution nodes (``aten::conv1d``,
which oneDNN's frozen-graph pass does not take) keep eager's. Each such sample's time is the
oneDNN call its frozen graph makes, on an input already in the blocked layout a previous
convolution leaves (:func:`~ftmodel.calibration.runtime_timing.ts_prepacked_conv`), less the
floor sample's call: the reorders around a lone convolution's graph are not part of it; and,
timed in the same rounds on the plain layout ``aten::to_mkldnn`` leaves, a twin of it for the
curves of convolutions on such inputs (:mod:`ftmodel.calibration.ts_conv_times`).

Inductor hands convolutions to aten too, but on channels-last tensors of its own layout choice,
for which oneDNN picks other kernels than for eager's NCHW ones (MobileNet-V3 at batch 4 ran 2.4x
faster under inductor than eager on the EPYC; a weight-heavy 1x1 convolution on a small map runs
about 4x slower): its conv samples are the same aten calls on channels-last tensors, timed
eagerly on the full grid (:mod:`ftmodel.calibration.channels_last`; through ``torch.compile``
each would be a C++ build).

TorchScript also gets curves for the reorders into and out of oneDNN's blocked layout and the
pointwise ops on blocked tensors that its frozen graph runs between convolutions
(:mod:`ftmodel.calibration.mkldnn_layout`).

Not measured: GPU frameworks (CUDA graphs); TorchScript's other classes; for inductor the
classes it hands to extern aten kernels as eager runs them (GEMM, attention) — those run the
eager curves.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ftmodel.calibration.channels_last import channels_last_run
from ftmodel.calibration.chunks import time_in_chunks
from ftmodel.calibration.mkldnn_layout import mkldnn_layout_curves
from ftmodel.calibration.runtime_timing import ort_node_shares
from ftmodel.calibration.ops import (OP_SWEEP_CLASSES, ORT_ONLY_CURVES, OpSample, op_samples,
                                    ort_samples)
from ftmodel.calibration.sweep_stage import grouped_curves, subset_curve
from ftmodel.calibration.ts_conv_times import PLAIN_LABEL, plain_twin, ts_node_times
from ftmodel.errors import FrameworkUnsupported
from ftmodel.estimate.kernels import DeviceModel, op_name
from ftmodel.frameworks.base import get_framework
from ftmodel.program import Kernel
from ftmodel.hardware.profile import DeviceProfile, OpClassData
from ftmodel.measure import Measurement, measure_interleaved
from ftmodel.tracing.dispatch import trace
from ftmodel.tracing.prepacked_variants import without_plain_input

__all__ = ["FrameworkSweep", "FRAMEWORK_SWEEPS", "framework_curve", "framework_curves",
           "framework_curve_steps", "variant_curves", "wanted", "without_samples"]

# the classes inductor hands to extern aten kernels as eager runs them (its convolutions it
# also hands to aten, but on channels-last tensors of its own layout choice: those it times)
_EXTERN = ("gemm", "bmm", "attention")
# the shared (eager) curves price a runtime's layout kernels only roughly: at most this share of
# a sample's time is taken off for them
_MAX_OTHERS_SHARE = 0.5


@dataclass(frozen=True)
class FrameworkSweep:
    """Which curves a framework gets of its own, and on which size grid."""

    curves: tuple[str, ...] | None  # None: every swept curve
    quick_grid: bool  # the short grid (a few sizes per family) even in a full calibration
    # its curves are split among a session's nodes by its own profiler: the in-model stage
    # fits host-side terms only (ftmodel.calibration.networks IN_MODEL_FORMS "n") and leaves device
    # time as the curves give it
    in_session_curves: bool = False
    # its curves are keyed by the op of the samples' main kernel (``<framework>/<curve>@<op>``),
    # so only that op's kernels use them and its other kernels of the class keep the shared
    # curves (TorchScript: prepacked ``prim::mkldnn_convolution``, not 1-d ``aten::conv1d``)
    by_op: bool = False
    # curves whose samples run as aten runs them inside the framework, on channels-last tensors
    # (ftmodel.calibration.channels_last), eagerly and on the full grid: inductor's convolutions
    channels_last: tuple[str, ...] = ()
    # its sweep also times ops of its own (ftmodel.calibration.ops.ort_samples: transposes on
    # each code path its lowering tells apart, fused residual layer norms, GRU layers); those
    # of a swept class make the curves of their kernels' variants (``<framework>/copy:<path>``,
    # ``<framework>/norm:skip``) only, not the class's own curve, which prices the class's
    # other kernels; the others make a curve of their own (``<framework>/gemm@gru``)
    own_samples: bool = False


FRAMEWORK_SWEEPS: dict[str, FrameworkSweep] = {
    # its own kernel library (MLAS, NCHWc convolutions) and allocator for everything. Hot only:
    # its worker threads fall asleep during a cache flush, so a flushed ORT sample times thread
    # wake-ups, not cold operands (its floor rises from ~5 to ~80 µs after a flush, against
    # ~10 µs for eager); back to back inside a model they keep spinning. Each sample is its
    # session's wall-clock time less the floor's, times the main node's share of the node time
    # ORT's profiler records (ort_node_share): a lone conv's session also runs the layout
    # reorders around it. The in-model stage fits host-side terms only: a device scale fitted
    # on the synthetic networks (0.78 on the EPYC, when the curves were the profiler's node
    # times) did not transfer to real models. Its transposes run at 1.4-54 GB/s by code path
    # (ftmodel.frameworks.ort_transpose) and its fused residual layer norm at a third to a
    # tenth of its layer norm's speed: each gets a curve
    "onnxruntime": FrameworkSweep(None, quick_grid=False, in_session_curves=True,
                                  own_samples=True),
    # generated C++ loops for pointwise, reductions, norms, pooling; extern aten for the rest;
    # each sample is a C++ build, hence the short grid, except for its convolutions: aten's on
    # the channels-last tensors inductor lays them out in, timed without a build
    "inductor": FrameworkSweep(None, quick_grid=True, channels_last=("conv", "conv_grouped")),
    # torchscript runs aten kernels and keeps the shared (eager) curves, except for the
    # convolutions optimize_for_inference hands to oneDNN with prepacked weights
    # (prim::mkldnn_convolution), which eager's curves over-price (eager reorders weights on
    # every call); a tiny one costs ~23 us, which its host programs price per kernel. Each sample
    # is the oneDNN call its frozen graph makes, on an input already blocked, its output left
    # blocked (ts_prepacked_conv): in a graph of its own, its to_mkldnn/to_dense reorders
    # dominate, and behind another convolution the two graphs' output reorders differ. And its
    # linear layers: freezing transposes their weights once, so they run as aten::matmul on a
    # contiguous (in, out) matrix, then the bias add, not eager's addmm on the transposed view
    # (torch/csrc/jit/passes/frozen_linear_transpose.cpp)
    # (an MLP of 2048-wide layers at batch 1 ran 0.79x eager's time on the EPYC)
    "torchscript": FrameworkSweep(("conv", "conv_grouped", "gemm"), quick_grid=False,
                                  by_op=True),
}


def wanted(framework: str, curve: str) -> bool:
    """Whether ``framework`` gets its own ``curve``."""
    sweep = FRAMEWORK_SWEEPS.get(framework)
    if sweep is None:
        return False
    if framework == "inductor" and curve.split(":")[0].split("@")[0] in _EXTERN:
        return False
    if framework in ("onnxruntime", "inductor") and curve == "elementwise:inplace":
        return False  # no in-place ops in an ONNX graph; inductor functionalises them
    return sweep.curves is None or curve in sweep.curves


def _batch_of(sample: OpSample) -> int:
    """The batch a lowering is asked for: the first input's dim 0 (lowerings resize it)."""
    return int(sample.inputs[0].shape[0]) if sample.inputs[0].dim() else 1


def _main_kernel(kernels: Sequence[Kernel], op_class: str) -> Kernel | None:
    same = [k for k in kernels if k.op_class == op_class]
    pool = same or list(kernels)
    return max(pool, key=lambda k: (k.macs, k.bytes_total), default=None)


def framework_curve(framework: str, samples: Sequence[OpSample], device: str,
                    shared: DeviceProfile, *, rounds: int, round_s: float, by_op: bool = False,
                    channels_last: bool = False
                    ) -> tuple[OpClassData | None, list[dict[str, Any]], str]:
    """One curve's samples through ``framework``'s runner; (curve data, raw rows, main op).

    ``shared`` is the device profile calibrated so far (eager curves), which prices the other
    kernels of each sample's lowering. Samples the framework cannot run are skipped (and listed
    in the raw rows); the curve is None when no sample, or no floor, could run. The main op is
    the :func:`~ftmodel.estimate.kernels.op_name` most samples' main kernels share; with
    ``by_op`` only those samples make the curve. With ``channels_last`` each sample runs eagerly
    on channels-last tensors (:func:`~ftmodel.calibration.channels_last.channels_last_run`), its
    kernel the eager one, instead of through the framework's runner. Samples are built and
    timed in chunks that fit this machine's memory (:mod:`ftmodel.calibration.chunks`), each
    with its families' floors."""
    fw = get_framework(framework)
    assert fw.lower_model is not None and fw.runner is not None
    dev_type = "cpu" if device == "cpu" else "cuda"
    pricer = DeviceModel(shared, "fp32")
    mains: dict[str, tuple[Kernel, float]] = {}  # label -> (main kernel, other kernels' s)
    raw: list[dict[str, Any]] = []

    def built(s: OpSample) -> Callable[[], object] | None:
        """The sample's runner, its main kernel into ``mains``; None (a raw row) if skipped."""
        b = _batch_of(s)
        if channels_last:
            prog, fn = channels_last_run(s)
        else:
            try:
                # the runner first: the artifact it builds also serves the lowering
                fn = fw.runner(s.module, s.inputs, b, device=dev_type, dtype="fp32")
                prog = fw.lower_model(s.module, s.inputs, b, trace(s.module, s.inputs),
                                      device=dev_type, dtype="fp32")
            except FrameworkUnsupported as err:
                raw.append({"label": s.label, "skipped": str(err).splitlines()[0]})
                return None
        main = _main_kernel(prog.kernels, s.op_class)
        if main is None:  # the runtime folded the op away (e.g. an identity): nothing to time
            raw.append({"label": s.label, "skipped": "no kernel in the framework's lowering"})
            return None
        others = [k for k in prog.kernels if k is not main]
        other_s = float(pricer.kernel_times_s(others).sum()) if others and not s.is_floor else 0.0
        mains[s.label] = (main, other_s)
        return fn

    floor_fns = {s.label: fn for s in samples if s.is_floor and (fn := built(s)) is not None}
    floored = {s.family for s in samples if s.label in floor_fns}

    def floored_samples() -> Iterator[tuple[str, Callable[[], object]]]:
        for s in samples:
            fn = built(s) if not s.is_floor and s.family in floored else None
            if fn is not None:
                yield s.label, fn

    def measure(fns: dict[str, Callable[[], object]]) -> dict[str, Measurement]:
        with torch.no_grad():
            return measure_interleaved(fns, device=device, rounds=rounds, round_s=round_s,
                                       settle_s=fw.settle_s)

    timed = time_in_chunks(floor_fns, floored_samples(), measure)
    mains = {label: v for label, v in mains.items() if label in timed}
    ops = Counter(op_name(m.members[0]) for m, _ in mains.values() if m.members)
    main_op = ops.most_common(1)[0][0] if ops else ""
    if by_op:  # samples whose main kernel is another op would mix two kernels in one curve
        for label, (m, _) in list(mains.items()):
            if not m.members or op_name(m.members[0]) != main_op:
                mains.pop(label)
                timed.pop(label)
                raw.append({"label": label, "skipped": f"main kernel {m.members[:1]}, not "
                                                       f"{main_op}"})
    floors = {s.family: s.label for s in samples if s.is_floor and s.label in timed}
    if not floors or len(timed) <= len(floors):
        return None, raw, main_op
    node_times: dict[str, float] = {}
    plain_times: dict[str, float] = {}  # TorchScript's convolutions on a plain input
    shares: dict[str, float | None] = {}
    share_runs: dict[str, list[float]] = {}
    if framework == "onnxruntime":  # the median of a few profiled sessions' shares
        share_runs = ort_node_shares([
            (s, _batch_of(s), mains[s.label][0].members[0].split("::")[-1])
            for s in samples if s.label in timed and not s.is_floor])
        shares = {k: statistics.median(v) if v else None for k, v in share_runs.items()}
    elif framework == "torchscript":  # its prim:: convolutions, on a blocked and a plain input
        node_times, plain_times = ts_node_times(samples, mains, rounds=rounds, round_s=round_s)
    rows: list[tuple[float, float, float, float]] = []
    for s in samples:
        if s.is_floor or s.label not in timed or s.family not in floors:
            continue
        main, other_s = mains[s.label]
        floor = floors[s.family]
        hot, with_floors = timed[s.label]
        floor_s = with_floors[floor].time_s
        sample_s = hot.time_s - floor_s
        device_s = max(sample_s - min(other_s, _MAX_OTHERS_SHARE * sample_s), 1e-9)
        share = shares.get(s.label)
        if share is not None:  # the runtime's profiler splits the session's time among its nodes
            device_s = max(sample_s * share, 1e-9)
        node_s, floor_node_s = node_times.get(s.label), node_times.get(floor)
        node_timed = False
        variant = main.variant
        if node_s is not None and floor_node_s is not None:
            node_timed = True
            # the runtime times its own kernels: use that, less the floor node's fixed part
            # (output allocation, dispatch inside the node), which the host costs price; its
            # call on a blocked input (a lone convolution's graph feeds it to_mkldnn's tensor)
            device_s = max(node_s - floor_node_s, 1e-9)
            variant = without_plain_input(variant)
        rows.append(s.curve_row(main, device_s)[0])  # per step on a per-step curve
        row: dict[str, Any] = {"label": s.label, "total_s": hot.time_s,
                               "floor_s": floor_s, "others_s": other_s,
                               "spread": hot.spread, "kernel": list(main.members[:3]),
                               "node_s": node_s, "node_share": share,
                               **({"node_shares": share_runs[s.label]}
                                  if share_runs.get(s.label) else {}),
                               "variant": variant, "planes": main.planes}
        raw.append(row)
        if node_timed and s.label in plain_times and floor in plain_times:
            twin_s, twin = plain_twin(row, plain_times[s.label], plain_times[floor])
            rows.append(s.curve_row(main, twin_s)[0])
            raw.append(twin)
    if len(rows) < 3:  # too few points for a curve: the shared one serves
        return None, raw, main_op
    if not np.all(np.isfinite(np.asarray(rows))):
        return None, raw, main_op
    return OpClassData("samples", tuple(rows)), raw, main_op


def variant_curves(key: str, data: OpClassData, rows: Sequence[dict[str, Any]],
                   whole: bool = False) -> dict[str, OpClassData]:
    """``<key>:<variant>`` curves of the samples whose main kernel has that variant (e.g.
    convolutions on and off oneDNN's channel block), for variants with 3 or more samples, when
    the samples have more than one variant (with ``whole``, also when they all have the same
    one: the only curve kept of them). ``rows`` are :func:`framework_curve`'s raw rows, in
    which the timed ones follow the curve's samples in order."""
    variants = [str(r.get("variant", "")) for r in rows if "total_s" in r]
    if len(variants) != len(data.samples):
        return {}
    if whole and len(set(variants)) == 1 and variants[0] and len(variants) >= 3:
        return {f"{key}:{variants[0]}": data}
    return grouped_curves(f"{key}:", data, variants)


def without_samples(data: OpClassData, rows: Sequence[dict[str, Any]], labels: set[str]
                    ) -> OpClassData:
    """``data`` less the samples of ``labels`` (``rows``: :func:`framework_curve`'s raw rows, in
    which the timed ones follow the curve's samples in order); ``data`` itself when fewer than 3
    samples would be left."""
    timed = [str(r["label"]) for r in rows if "total_s" in r]
    if not labels or len(timed) != len(data.samples):
        return data
    keep = [i for i, label in enumerate(timed) if label not in labels]
    return subset_curve(data, keep) if len(keep) >= 3 else data


def framework_curves(framework: str, shared: DeviceProfile, device: str, quick: bool, *,
                     rounds: int, round_s: float,
                     step: Callable[[str], object] = lambda desc: None
                     ) -> tuple[dict[str, OpClassData], dict[str, list[dict[str, Any]]]]:
    """Every curve ``framework`` gets of its own (:data:`FRAMEWORK_SWEEPS`), keyed
    ``<framework>/<curve>`` (``@<op>`` added for a sweep ``by_op``), plus
    ``<framework>/elementwise:math`` (the union of its transcendental curves, as for the shared
    ones) and, for TorchScript, its oneDNN-layout curves
    (:func:`ftmodel.calibration.mkldnn_layout.mkldnn_layout_curves`); (curves, raw rows per
    curve). ``step`` is
    called once per curve measured (progress)."""
    spec = FRAMEWORK_SWEEPS[framework]
    grid = op_samples(quick or spec.quick_grid)
    full = op_samples(quick) if spec.channels_last and device == "cpu" else grid
    curves: dict[str, OpClassData] = {}
    raw: dict[str, list[dict[str, Any]]] = {}
    own = ort_samples(quick or spec.quick_grid) if spec.own_samples else {}
    for curve in (*OP_SWEEP_CLASSES, *(ORT_ONLY_CURVES if spec.own_samples else ())):
        cl = device == "cpu" and curve in spec.channels_last
        extra = own.get(curve, [])
        samples = (full if cl else grid).get(curve, []) + extra
        if not samples or not wanted(framework, curve):
            continue
        data, rows, op = framework_curve(framework, samples, device, shared, rounds=rounds,
                                         round_s=round_s, by_op=spec.by_op, channels_last=cl)
        key = f"{framework}/{curve}" + (f"@{op}" if spec.by_op and op else "")
        raw[key] = rows
        if data is not None:
            # channels-last curves by their variants (``<backend>_nhwc``) only: a class-level
            # curve would also price the framework's contiguous (1-d) convolutions
            if not cl:  # own samples of a swept class only make its variants' curves
                # nor do the twins of TorchScript's convolutions timed on a plain input
                twins = {str(r["label"]) for r in rows
                         if str(r.get("label", "")).endswith(PLAIN_LABEL)}
                curves[key] = (without_samples(data, rows, {s.label for s in extra} | twins)
                               if curve in OP_SWEEP_CLASSES else data)
            curves.update(variant_curves(key, data, rows, whole=cl))
        step(f"{framework} {curve}")
    if framework == "torchscript" and device == "cpu":  # its oneDNN-layout reorders and ops
        layout, layout_raw = mkldnn_layout_curves(device, quick, rounds=rounds, round_s=round_s)
        curves.update(layout)
        raw.update(layout_raw)
        step("torchscript oneDNN layout")
    math = [d for c, d in curves.items() if "/elementwise@" in c]
    if math:
        curves[f"{framework}/elementwise:math"] = OpClassData(
            "samples", tuple(r for d in math for r in d.samples))
    return curves, raw


def framework_curve_steps(frameworks: Iterable[str], device: str) -> int:
    """Progress steps :func:`framework_curves` takes for these frameworks on ``device``."""
    return sum(sum(1 for c in OP_SWEEP_CLASSES if wanted(fw, c)) + (fw == "torchscript")
               + (len(ORT_ONLY_CURVES) + 1 if FRAMEWORK_SWEEPS[fw].own_samples else 0)
               for fw in frameworks if fw in FRAMEWORK_SWEEPS and device == "cpu")
