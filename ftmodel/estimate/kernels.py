"""Device time of each kernel, from a device profile's per-op-class data.

Two kinds of op-class data:

* ``samples`` (calibrated): rows of ``[macs, bytes_read, bytes_written, time_s]`` measured by the
  calibration suite, where ``time_s`` is the kernel time above the tiny-size floor (the floor is
  host cost). A kernel's time is ``work × throughput⁻¹`` with the inverse throughput
  interpolated in log-feature space (features: log MACs and log bytes for matrix-like classes,
  with log arithmetic intensity weighted as each curve's own samples choose by leave-one-out,
  see ``INTENSITY_WEIGHTS``; log bytes read/written otherwise): linearly inside the samples'
  hull, by distance-weighted nearest neighbours outside it. The result is tabulated and made
  monotone — more MACs or more bytes never take less time (:class:`SampleCurve`). Beyond the
  sampled range the query is moved to the range's edge, so the throughput of the edge samples
  is kept and time grows linearly with work.
* ``roofline`` (spec-derived): ``max(macs / (peak·eff(macs)), bytes / (bw·eff(bytes)))`` with a
  saturating efficiency ``eff(w) = w / (w + w_half)`` and a per-kernel floor. With
  ``wave_slots`` (SMs) and ``tile_outputs`` a MAC kernel's compute time is also multiplied by its
  wave quantisation (:func:`wave_factor`): a kernel too small to give every SM a tile of output
  runs at the speed of the SMs it occupies. Every parameter may
  be specialised per math dtype with a ``:<dtype>`` suffix (``peak_macs_per_s:fp16`` for tensor
  cores); a kernel uses ``<name>:<dtype>`` if present, else ``<name>``. The math dtype is the
  kernel's own (``float16`` -> ``fp16``), except that fp32 kernels use ``tf32`` when the
  prediction's dtype is ``tf32``.

Cache state: a ``samples`` class may also carry ``cold_s``, each sample timed again with cold
operands (streamed from memory). Given each kernel's cold fraction ``f`` (from
:mod:`ftmodel.estimate.cache`), its time is ``t_hot + f · max(0, t_cold − t_hot)``. A MAC
kernel's ``t_cold − t_hot`` is its read bytes times the cache probe's penalty per byte where the
profile has it (:func:`ftmodel.estimate.streaming.stream_mac_penalty`), whatever its curve; a
framework's own curve without cold samples otherwise borrows the penalty of the shared curve
the kernel would otherwise use (a MAC kernel: of a shared reduction over its bytes, see
``DeviceModel._borrow_cold_penalty``); other classes without cold data, and roofline classes
(whose bandwidth term already streams every byte), use ``t_hot``.

Frameworks whose kernels differ from eager's on the same device (ONNX Runtime's MLAS kernels and
arena allocator, inductor's generated loops) have their own curves, keyed
``<framework>/<class>...``; a DeviceModel built for that framework looks among them first (``@op``,
then ``:variant``, then the class) and falls back to the shared curves.

A kernel whose variant declares sequential steps (``steps=<n>,rec=<share>``: a fused LSTM/GRU
layer, one step per token) is priced as the library runs it when its curve is one of pre-packed
GEMMs (a framework's own, e.g. ONNX Runtime's MLAS): the input projection (``1 − share`` of its
MACs, with the input weights) as one GEMM over all tokens, then ``n`` steps of the recurrent
projection, each ``share / n`` of the MACs reading the recurrent weights whole, since each step
waits for the previous one; only the first step pays the cold-operand penalty. On a curve of
whole fused layers measured per step (``gemm@mkldnn_rnn_layer``, eager's oneDNN LSTM layer; see
``curves.STEP_CURVES``) each step does ``1 / n`` of the layer's MACs and activation bytes and
reads every weight, ``n`` times (``curves.step_work``), plus, where the profile has it, the
curve's per-call cost at a step's work (``<curve>:per_call``, ``curves.PER_CALL``).
Eager's GEMM samples re-pack the weights on every call (oneDNN/MKL), which a fused layer does
once per call: a profile without that curve prices the layer as one GEMM of all its MACs, which
under-prices small batches (an LSTM language model at batch 1: 0.55x on the EPYC).

Physics floor: on sampled profiles no kernel is priced below its MACs at the fastest MAC rate
any calibrated sample of a matrix-like class reached, nor below its bytes at the fastest byte
rate any sample of another class reached (both over samples of at least
``peaks.FLOOR_SAMPLE_MIN_S``, whose time is resolved; :func:`measured_peaks`). A curve
interpolating between a real sample and one whose time vanished under its floor (an ONNX
Runtime transpose of 256 KiB at 0.08 µs) is held to what the device was ever seen to do.
Roofline profiles have their spec sheet's peaks.

Work is MACs for matrix-like classes and bytes moved for the others, except a pool that counts
the bytes its windows read (``Kernel.bytes_window_reads``): where the profile has its op's
per-window curve (``pool@<op>:windows``, ``curves.WINDOWS``) it is read there at those bytes
(its physics floor stays at the bytes it moves); a kernel's transposed bytes go on the
framework's transpose curve. Curves may be keyed by ``<class>:<variant>`` (``elementwise:math``)
or, for transcendental ops whose cost differs several-fold, ``<class>@<op>``
(``elementwise@tanh``): a kernel uses the most specific curve the profile has (``@op`` →
``math`` → the class). A class missing from the profile borrows a related one's data, warned.
"""

from __future__ import annotations

from collections.abc import Sequence
import numpy as np

from ftmodel.errors import ProfileError
from ftmodel.estimate.cache import CacheModel
from ftmodel.estimate.curves import (LSTM_STEP_CURVE, PER_CALL, PER_PLANE, STEP_CURVES, WINDOWS,
                                     SampleCurve, step_work)
from ftmodel.estimate.peaks import OFF_WORK_AXIS, measured_peaks
from ftmodel.estimate.roofline import Roofline, wave_factor
from ftmodel.estimate.streaming import read_once, stream_mac_penalty
from ftmodel.estimate.transposes import TransposedBytes
from ftmodel.program import Kernel
from ftmodel.hardware.profile import DeviceProfile
from ftmodel.tracing.formulas import MAC_CLASSES
from ftmodel.tracing.rnn_variants import directions_of, steps_of
from ftmodel.tracing.prepacked_variants import PLAIN_INPUT, fallback_variant

__all__ = ["DeviceModel", "FALLBACK_CLASS", "blend_hot_cold", "measured_peaks", "wave_factor"]

FALLBACK_CLASS = {
    "gemm": "bmm", "bmm": "gemm", "attention": "bmm", "conv": "gemm", "conv_grouped": "conv",
    "norm": "elementwise", "softmax": "elementwise", "reduction": "elementwise",
    "pool": "elementwise", "embedding": "copy", "copy": "elementwise", "other": "copy",
    "elementwise": "copy",
}
# the shared curve whose cold penalty a MAC kernel on a hot-only framework curve borrows
STREAM_CLASS = "reduction"


def op_name(member: str) -> str:
    """A kernel member's operator, the same across frameworks: ``aten.tanh_.default``,
    ``aten::tanh`` and ``Tanh`` give ``tanh``; ``com.microsoft::QuickGelu`` gives
    ``quickgelu``."""
    name = member.split("::")[-1]
    parts = name.split(".")
    if len(parts) >= 2 and parts[0] == "aten":
        name = parts[1]
    return name.rstrip("_").lower()


def blend_hot_cold(hot_s: np.ndarray, cold_s: np.ndarray, cold_fraction: np.ndarray
                   ) -> np.ndarray:
    """``t_hot + f · max(0, t_cold − t_hot)`` per kernel (``f`` = share of cold operand bytes)."""
    blended: np.ndarray = hot_s + np.clip(cold_fraction, 0.0, 1.0) * np.maximum(cold_s - hot_s,
                                                                                0.0)
    return blended


_DTYPE_KEYS = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16", "float64": "fp64"}


class DeviceModel:
    """Predicts device time per kernel for one DeviceProfile (curves built once)."""

    def __init__(self, device: DeviceProfile, dtype: str = "fp32", framework: str = "") -> None:
        self.device = device
        self.dtype = dtype  # the prediction's dtype: "tf32" makes fp32 kernels use tf32 params
        self.framework = framework  # prefers "<framework>/<class>" curves where the profile has
        self._curves: dict[str, SampleCurve | Roofline] = {}
        self._cold: dict[str, SampleCurve] = {}  # the same samples timed with cold operands
        self.cache = CacheModel.from_params(device.cache, framework)
        self._peak_macs_per_s, self._peak_bytes_per_s = measured_peaks(device)
        for name, data in device.op_classes.items():
            if data.model == "samples":
                base = name.split("/")[-1].split(":")[0].split("@")[0]
                if name.endswith(PER_PLANE):  # its axis is the count, held as bytes read,
                    base = "copy"  # whatever the class of the curve it accompanies
                # a per-call (per-plane, per-window) curve's axis is a step's work (planes,
                # window reads), not the call's: no rate limits it
                peak = 0.0 if name.endswith(OFF_WORK_AXIS) else (
                    self._peak_macs_per_s if base in MAC_CLASSES else self._peak_bytes_per_s)
                # a per-step curve's bytes are the weights every step reads (SampleCurve)
                steps = (name.split("/")[-1].split(":")[0] in STEP_CURVES
                         and not name.endswith(PER_CALL))
                self._curves[name] = SampleCurve.fit(base, data, peak_rate=peak,
                                                     monotone_in_bytes=not steps)
                if data.cold_s:
                    self._cold[name] = SampleCurve.fit(base, data, cold=True, peak_rate=peak,
                                                       monotone_in_bytes=not steps)
            else:
                self._curves[name] = Roofline(dict(data.params))
        self._transposes = TransposedBytes.of(self._curves, framework)
        # whether some of the framework's own curves lack cold samples (see
        # _borrow_cold_penalty); False for eager and every profile without own curves
        own = f"{framework}/"
        self._borrows = bool(framework) and bool(self._cold) and any(
            n.startswith(own) and n not in self._cold for n in self._curves)

    def _key(self, op_class: str, variant: str, op: str, own: bool = True,
             windows: bool = False) -> str:
        """The most specific curve: for a pool that counts its window reads (``windows``), its
        op's per-window curve (``@op:windows``, :data:`~ftmodel.estimate.curves.WINDOWS`);
        ``@op:variant`` (for a convolution on a plain input, then ``@op:`` its variant without
        it), ``@op``, then ``:variant`` and ``:`` its
        :func:`~ftmodel.tracing.prepacked_variants.fallback_variant` (``mkldnn_gemm``, then
        ``:mkldnn``; ``mkldnn_ref``, ``:math``), then the class —
        first among the framework's own curves (``<framework>/...``, measured through its
        runtime; skipped when ``own`` is false), then among the shared ones. A fused recurrent
        layer (a ``steps=`` variant) looks for a per-step curve of such layers
        (:data:`STEP_CURVES`) before those, its op's own, else the LSTM's: ONNX Runtime's GRU
        nodes take the one measured through its GRU where the profile has one, its LSTM nodes
        the one measured through its LSTM, not its lone GEMM samples, which lack the fixed work
        of each step."""
        prefixes = (f"{self.framework}/", "") if self.framework and own else ("",)
        name = op_name(op) if op else ""
        levels = []
        fallback = fallback_variant(variant)
        own_fallback = fallback if variant.endswith(PLAIN_INPUT) else ""
        if name:
            levels = ([f"{op_class}@{name}{WINDOWS}"] if windows else []) + [
                f"{op_class}@{name}:{v}" for v in (variant, own_fallback) if v] + [
                f"{op_class}@{name}"]
        if steps_of(variant)[0] > 1:  # a fused recurrent layer: its op's per-step curve, else
            # the LSTM's, then the rest
            levels = [c for c in dict.fromkeys((f"{op_class}@{name}", LSTM_STEP_CURVE))
                      if c in STEP_CURVES and c.startswith(f"{op_class}@")] + levels
        levels += [f"{op_class}:{v}" for v in (variant, fallback) if v]
        for p in prefixes:
            for key in levels + [op_class]:
                if p + key in self._curves:
                    return p + key
        return op_class

    def _curve_name(self, op_class: str, warnings: list[str]) -> str:
        seen = [op_class]
        cls = op_class
        while cls not in self._curves:
            cls = FALLBACK_CLASS.get(cls, "elementwise")
            if cls in seen:
                raise ProfileError(
                    f"device profile {self.device.name!r} has no data for op class {op_class!r} "
                    f"nor its fallbacks ({', '.join(seen)}); it has: "
                    f"{', '.join(sorted(self._curves)) or 'nothing'} — re-run the calibration")
            seen.append(cls)
        if cls != op_class:
            warnings.append(f"device profile {self.device.name!r} has no data for op class "
                            f"{op_class!r}; used {cls!r} instead")
        return cls

    @property
    def has_cold_data(self) -> bool:
        """Whether any curve has cold-operand samples and the device a cache model."""
        return bool(self._cold) and self.cache is not None

    def hot_cold_times_s(self, kernels: Sequence[Kernel], warnings: list[str] | None = None
                         ) -> tuple[np.ndarray, np.ndarray]:
        """(hot, cold) device seconds of each kernel, in order; cold = hot for classes without
        cold-operand data; a pure function of the kernel (transposes: :mod:`~.transposes`)."""
        warns: list[str] = [] if warnings is None else warnings
        if self._transposes is None:
            return self._hot_cold(kernels, warns)
        rest, idx, moved_s = self._transposes.split(kernels)
        hot, cold = self._hot_cold(rest, warns)
        hot[idx], cold[idx] = hot[idx] + moved_s, cold[idx] + moved_s
        return hot, cold

    def _hot_cold(self, kernels: Sequence[Kernel], warns: list[str]
                  ) -> tuple[np.ndarray, np.ndarray]:
        n = len(kernels)
        if n == 0:
            return np.zeros(0), np.zeros(0)
        # per-window curves time aten's pools on plain tensors, not a variant (oneDNN's on
        # blocked ones)
        classes = np.array([self._key(k.op_class, k.variant, k.members[0] if k.members else "",
                                      windows=k.bytes_window_reads > 0 and not k.variant)
                            for k in kernels])
        dtypes = np.array([self._math_dtype(k.dtype) for k in kernels])
        macs = np.array([k.macs for k in kernels], dtype=np.float64)
        # a kernel that streams its weights several times is looked up on all it reads
        # (Kernel.read_traffic_bytes); the cache model's cold share is of each operand once
        br = np.array([k.read_traffic_bytes for k in kernels], dtype=np.float64)
        bw = np.array([k.bytes_written for k in kernels], dtype=np.float64)
        # steps are priced on curves of pre-packed GEMMs only: a framework's own (ONNX Runtime's
        # MLAS); eager's GEMM samples re-pack their weights on every call, which a fused layer
        # does once, so there the layer stays one GEMM over all its tokens
        own = f"{self.framework}/"
        per_step = np.array([str(c).rsplit("/", 1)[-1] in STEP_CURVES for c in classes])
        traits = [steps_of(k.variant) if str(c).startswith(own) or p else (1, 0.0)
                  for k, c, p in zip(kernels, classes, per_step)]
        if all(t[0] == 1 for t in traits):
            return self._times(kernels, classes, dtypes, macs, br, bw, warns)
        steps = np.array([t[0] for t in traits], dtype=np.float64)
        # fused recurrent layers: the input projection is one GEMM over all tokens, the
        # recurrent one runs step after step, each step reading the recurrent weights whole
        rec = np.where(per_step, 0.0, np.array([t[1] for t in traits]))
        wts = np.array([k.bytes_weights for k in kernels], dtype=np.float64)
        act = np.maximum(br - wts, 0.0)
        hot, cold = self._times(kernels, classes, dtypes, macs * (1 - rec),
                                wts * (1 - rec) + act, bw, warns)
        # on a per-step curve (STEP_CURVES), a step's share of all the work, ``steps`` times
        p = np.flatnonzero(per_step & (steps > 1))
        if len(p):
            s = steps[p]
            wts = np.array([kernels[i].bytes_weights for i in p.tolist()], dtype=np.float64)
            # a kernel running its directions one after the other: each step reads one's weights
            one_way = wts / np.array([directions_of(kernels[i].variant) for i in p.tolist()])
            step = step_work(macs[p], br[p] - wts + one_way, one_way, bw[p], s)
            h_step, c_step = self._times([kernels[i] for i in p.tolist()], classes[p], dtypes[p],
                                         *step, warns)
            call = np.zeros(len(p))  # each call's own cost, where the profile measured it
            for cls in np.unique(classes[p]):
                if str(cls) + PER_CALL in self._curves:
                    sel = classes[p] == cls
                    call[sel] = self._curves[str(cls) + PER_CALL](*(w[sel] for w in step))
            hot[p] = s * h_step + call
            cold[p] = hot[p] + (c_step - h_step)  # only the first step finds them cold
        r = np.flatnonzero(~per_step & (steps > 1))
        if len(r) == 0:
            return hot, cold
        s = steps[r]
        h_step, c_step = self._times([kernels[i] for i in r.tolist()], classes[r], dtypes[r],
                                     macs[r] * rec[r] / s, wts[r] * rec[r] + act[r] / s,
                                     bw[r] / s, warns)
        # only the first step finds its operands cold
        cold[r] = cold[r] + s * h_step + (c_step - h_step)
        hot[r] = hot[r] + s * h_step
        return hot, cold

    def _times(self, kernels: Sequence[Kernel], classes: np.ndarray, dtypes: np.ndarray,
               macs: np.ndarray, br: np.ndarray, bw: np.ndarray, warns: list[str]
               ) -> tuple[np.ndarray, np.ndarray]:
        """(hot, cold) seconds of kernels of these classes doing this work, floored; a
        per-window curve is read at the bytes the kernels' windows read."""
        n = len(kernels)
        hot, cold = np.zeros(n), np.zeros(n)
        for cls in np.unique(classes):
            name = self._curve_name(str(cls), warns)
            curve = self._curves[name]
            x = br if not name.endswith(WINDOWS) else np.array(
                [k.bytes_window_reads for k in kernels], dtype=np.float64)
            for dt in np.unique(dtypes[classes == cls]):
                sel = (classes == cls) & (dtypes == dt)
                if isinstance(curve, Roofline):
                    hot[sel] = curve(macs[sel], x[sel], bw[sel], str(dt))
                else:
                    hot[sel] = curve(macs[sel], x[sel], bw[sel])
                cold[sel] = (self._cold[name](macs[sel], x[sel], bw[sel]) if name in self._cold
                             else hot[sel])
            self._plane_cost(kernels, classes == cls, name, hot, cold)
        stream_mac_penalty(kernels, hot, cold, br, self.cache)
        self._borrow_cold_penalty(kernels, classes, hot, cold, macs, br, bw)
        floor = np.full(n, self.device.kernel_floor_s)
        if self._peak_macs_per_s > 0:
            floor = np.maximum(floor, macs / self._peak_macs_per_s)
        if self._peak_bytes_per_s > 0:
            floor = np.maximum(floor, (br + bw) / self._peak_bytes_per_s)
        return np.maximum(hot, floor), np.maximum(cold, floor)

    def _plane_cost(self, kernels: Sequence[Kernel], sel: np.ndarray, name: str,
                    hot: np.ndarray, cold: np.ndarray) -> None:
        """Adds, in place, the per-plane cost of the selected kernels that count their planes
        (``Kernel.planes``), read off the curve's ``:per_plane`` companion where the profile
        has one: what looping over many small (image, channel) planes costs beyond the curve
        of few large ones (batch norm on a CPU)."""
        curve = self._curves.get(name + PER_PLANE)
        if curve is None or isinstance(curve, Roofline):
            return
        idx = np.flatnonzero(sel)
        planes = np.array([kernels[i].planes for i in idx.tolist()], dtype=np.float64)
        some = planes > 0
        if not some.any():
            return
        idx, planes = idx[some], planes[some]
        zeros = np.zeros(len(idx))
        extra = curve(zeros, planes, zeros)
        hot[idx] += extra
        cold[idx] += extra

    def _borrow_cold_penalty(self, kernels: Sequence[Kernel], classes: np.ndarray,
                             hot: np.ndarray, cold: np.ndarray, macs: np.ndarray,
                             br: np.ndarray, bw: np.ndarray) -> None:
        """A kernel on a framework's own curve without cold samples (ONNX Runtime's: its
        worker threads sleep through a cache flush, so a flushed sample times their wake-up;
        inductor's generated loops) borrows a cold penalty ``t_cold − t_hot`` from the shared
        curves: streaming bytes from memory costs what the memory system charges, whichever
        loop reads them. A memory-bound kernel takes the penalty of the shared curve it would
        otherwise use. A MAC kernel pays the cache probe's penalty per byte
        (:func:`~ftmodel.estimate.streaming.stream_mac_penalty`, the measurement the cache
        model's ``stream_share`` is fitted to, so the blend reproduces the probe's in-chain
        cost); in a profile without it,
        that of a shared reduction reading its bytes (:data:`STREAM_CLASS`: reads, barely
        writes, like a GEMM streaming its weights), whose flushed samples cost 4-5× less per
        byte than the probe's layer on the Intel Xeon (ONNX Runtime's ResNet-34 at batch 1 had
        its 512-channel convolutions priced at 0.65 of their node times). Not eager's GEMM/conv
        curves: eager's cold samples include the library's per-call weight packing from cold
        memory, which runtimes with pre-packed weights (ONNX Runtime) do not pay — borrowed,
        that penalty over-predicted ONNX Runtime's CNNs up to 3×. In place."""
        if not self._borrows:
            return
        prefix = f"{self.framework}/"
        own = np.array([str(c).startswith(prefix) and str(c) not in self._cold
                        for c in classes])
        if not own.any():
            return
        idx = np.flatnonzero(own)
        br = br.copy()
        br[idx] = read_once(kernels, idx, br)
        per_byte = self.cache.cold_s_per_byte if self.cache is not None else 0.0
        if per_byte > 0.0:  # MAC kernels: priced per byte already (stream_mac_penalty)
            mac = np.array([kernels[i].op_class in MAC_CLASSES for i in idx.tolist()], dtype=bool)
            idx = idx[~mac]
        shared = np.array([STREAM_CLASS if kernels[i].op_class in MAC_CLASSES else
                           self._key(kernels[i].op_class, kernels[i].variant,
                                     kernels[i].members[0] if kernels[i].members else "",
                                     own=False) for i in idx.tolist()])
        for name in np.unique(shared):
            name = str(name)
            if name not in self._cold or not isinstance(self._curves.get(name), SampleCurve):
                continue
            sel = idx[shared == name]
            penalty = (self._cold[name](macs[sel], br[sel], bw[sel])
                       - self._curves[name](macs[sel], br[sel], bw[sel]))
            cold[sel] = hot[sel] + np.maximum(penalty, 0.0)

    def kernel_times_s(self, kernels: Sequence[Kernel], warnings: list[str] | None = None,
                       cold: np.ndarray | None = None) -> np.ndarray:
        """Device seconds of each kernel, in order.

        ``cold``: per kernel, the share of its read bytes that is cold (see
        :func:`ftmodel.estimate.cache.cold_fractions`); None = all hot.
        """
        hot, cold_s = self.hot_cold_times_s(kernels, warnings)
        return hot if cold is None else blend_hot_cold(hot, cold_s, cold)

    def _math_dtype(self, torch_dtype: str) -> str:
        key = _DTYPE_KEYS.get(torch_dtype, torch_dtype)
        return "tf32" if key == "fp32" and self.dtype == "tf32" else key
