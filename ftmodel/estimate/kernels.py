"""Device time of each kernel, from a device profile's per-op-class data.

Two kinds of op-class data:

* ``samples`` (calibrated): rows of ``[macs, bytes_read, bytes_written, time_s]`` measured by the
  calibration suite, where ``time_s`` is the kernel time above the tiny-size floor (the floor is
  host cost). A kernel's time is ``work × throughput⁻¹`` with the inverse throughput
  interpolated in log-feature space (features: log MACs and log bytes for matrix-like classes,
  with log arithmetic intensity weighted as each curve's own samples choose by leave-one-out,
  see ``INTENSITY_WEIGHTS``; log bytes read/written otherwise): linearly inside the samples'
  hull, by distance-weighted nearest neighbours outside it. The result is tabulated and made
  monotone — more MACs or more bytes never take less time (:class:`_SampleCurve`). Beyond the
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
:mod:`ftmodel.estimate.cache`), its time is ``t_hot + f · max(0, t_cold − t_hot)``; a
framework's own curve without cold samples borrows the penalty ``t_cold − t_hot`` of the shared
curve the kernel would otherwise use (a MAC kernel: of a shared reduction over its bytes, see
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
waits for the previous one; only the first step pays the cold-operand penalty. Eager's GEMM
samples re-pack the weights on every call (oneDNN/MKL), which a fused layer does once per call:
on them the layer is one GEMM of all its MACs, which under-prices small batches (an LSTM
language model at batch 1: 0.55x on the EPYC).

Physics floor: on sampled profiles no kernel is priced below its MACs at the fastest MAC rate
any calibrated sample of a matrix-like class reached, nor below its bytes at the fastest byte
rate any sample of another class reached (both over samples of at least
``FLOOR_SAMPLE_MIN_S``, whose time is resolved; :func:`measured_peaks`). A curve interpolating
between a real sample and one whose time vanished under its floor (an ONNX Runtime transpose of
256 KiB at 0.08 µs) is held to what the device was ever seen to do. Roofline profiles have
their spec sheet's peaks.

Work is MACs for matrix-like classes and bytes moved for the others. Curves may be keyed by
``<class>:<variant>`` (e.g. ``elementwise:inplace``, ``elementwise:math``) or, for
transcendental ops whose cost differs several-fold, ``<class>@<op>`` (``elementwise@tanh``): a
kernel uses the most specific curve the profile has (``@op`` → ``math`` → the class). An op class missing
from the profile borrows a related class's data and the estimate warns.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.interpolate import LinearNDInterpolator
from scipy.spatial import QhullError

from ftmodel.errors import ProfileError
from ftmodel.estimate.cache import CacheModel
from ftmodel.estimate.roofline import Roofline, wave_factor
from ftmodel.frameworks.base import Kernel
from ftmodel.hardware.profile import DeviceProfile, OpClassData
from ftmodel.tracing.formulas import MAC_CLASSES, steps_of

__all__ = ["DeviceModel", "FALLBACK_CLASS", "FLOOR_SAMPLE_MIN_S", "blend_hot_cold", "measured_peaks",
           "wave_factor"]

FALLBACK_CLASS = {
    "gemm": "bmm", "bmm": "gemm", "attention": "bmm", "conv": "gemm", "conv_grouped": "conv",
    "norm": "elementwise", "softmax": "elementwise", "reduction": "elementwise",
    "pool": "elementwise", "embedding": "copy", "copy": "elementwise", "other": "copy",
    "elementwise": "copy",
}
_EPS = 1.0
# the shared curve whose cold penalty a MAC kernel on a hot-only framework curve borrows
STREAM_CLASS = "reduction"
# samples shorter than this are not trusted to set the measured peak rates (timer resolution,
# floor subtraction): the physics floor comes from well-resolved samples only
FLOOR_SAMPLE_MIN_S = 10e-6


def measured_peaks(device: DeviceProfile) -> tuple[float, float]:
    """(MACs per second, bytes per second): the fastest rates any calibrated sample resolved
    (time at least :data:`FLOOR_SAMPLE_MIN_S`) reached — MACs over matrix-like classes, bytes
    read and written over the others, every framework's curves included; 0 where none."""
    peak_macs = peak_bytes = 0.0
    for name, data in device.op_classes.items():
        if data.model != "samples" or not data.samples:
            continue
        rows = np.asarray(data.samples, dtype=np.float64)  # (n, 4): macs, read, written, s
        ok = rows[:, 3] >= FLOOR_SAMPLE_MIN_S
        if not ok.any():
            continue
        base = name.split("/")[-1].split(":")[0].split("@")[0]
        if base in MAC_CLASSES:
            peak_macs = max(peak_macs, float((rows[ok, 0] / rows[ok, 3]).max()))
        else:
            peak_bytes = max(peak_bytes, float(((rows[ok, 1] + rows[ok, 2]) / rows[ok, 3]).max()))
    return peak_macs, peak_bytes


# How far apart two MAC kernels are, for the nearest-neighbour curves: the weight of log
# arithmetic intensity (MACs per byte) next to log MACs. 0 is the plain (log MACs, log bytes)
# plane. A GEMM with few rows (m = 1-16, a 1×1 convolution on a 2×2 map) streams its weights at
# a few MACs per byte and runs several times slower per MAC than a GEMM of the same MACs and
# bytes with more rows; in the plain plane its nearest samples may be those, while weighting
# intensity keeps its neighbours among kernels of like intensity. Each curve keeps the weight
# that predicts its own samples best, each from the others (:meth:`_SampleCurve.fit`).
INTENSITY_WEIGHTS = (0.0, 1.0, 2.0)


def _features(op_class: str, macs: np.ndarray, br: np.ndarray, bw: np.ndarray,
              intensity_weight: float = 0.0) -> np.ndarray:
    if op_class in MAC_CLASSES:
        log_macs, log_bytes = np.log(macs + _EPS), np.log(br + bw + _EPS)
        if intensity_weight:
            return np.stack([log_macs, intensity_weight * (log_macs - log_bytes)], axis=1)
        return np.stack([log_macs, log_bytes], axis=1)
    return np.log(np.stack([br + _EPS, bw + _EPS], axis=1))


def _distances(q: np.ndarray, feats: np.ndarray) -> np.ndarray:
    return np.sqrt(((q[:, None, :] - feats[None, :, :]) ** 2).sum(-1))  # (N, M)


def _knn_log_inv(d: np.ndarray, log_inv: np.ndarray, k: int) -> np.ndarray:
    """Distance-weighted mean of the ``k`` nearest samples' log inverse throughput, given each
    query's distances ``d`` (N, M) to the samples."""
    idx = np.argsort(d, axis=1)[:, :k]  # (N, k)
    w = 1.0 / np.maximum(np.take_along_axis(d, idx, axis=1), 1e-3) ** 2
    return (w * log_inv[idx]).sum(1) / w.sum(1)


def _loo_error(feats: np.ndarray, log_inv: np.ndarray, k: int) -> float:
    """Median |log error| of each sample predicted from the others (leave-one-out)."""
    d = _distances(feats, feats)
    np.fill_diagonal(d, np.inf)  # a sample is never its own neighbour
    return float(np.median(np.abs(_knn_log_inv(d, log_inv, k) - log_inv)))


def _work(op_class: str, macs: np.ndarray, br: np.ndarray, bw: np.ndarray) -> np.ndarray:
    return (macs if op_class in MAC_CLASSES else br + bw) + _EPS


# Spacing of the monotone grid (:class:`_SampleCurve`), in natural-log units of work: 0.15 is
# ~16% more work from one node to the next, finer than the samples (a factor 2-4 apart)
GRID_STEP = 0.15


def _cumulative(a: np.ndarray, op: np.ufunc, reverse: bool) -> np.ndarray:
    """``op``-accumulate along both axes of a 2-D grid: with ``np.maximum`` from the low corner,
    each node takes the largest value of the nodes it dominates (no larger on either axis)."""
    if reverse:
        return op.accumulate(op.accumulate(a[::-1, ::-1], axis=0), axis=1)[::-1, ::-1]
    return op.accumulate(op.accumulate(a, axis=0), axis=1)


@dataclass
class _SampleCurve:
    """Interpolated log inverse throughput, made monotone in work.

    Inside the samples' hull (in feature space) the log inverse throughput is interpolated
    linearly (Delaunay triangles; along a line when the samples lie on one, as a byte class's
    sweep of one read/write ratio does), so a calibrated sample is reproduced and time between
    two samples moves between theirs. Outside it, the distance-weighted mean of the ``k``
    nearest samples (:meth:`raw`), each feature clipped to the samples' range. Samples at the
    same features (two shapes of one size) are averaged first.

    Neither is monotone on its own: between samples of unlike intensity a kernel with more MACs
    and more bytes can land among faster neighbours and be priced below a smaller one (a skinny
    GEMM at batch 8 below batch 4), and the weighted mean swings between samples. The curve
    therefore tabulates the log time on a grid over the samples' range — (log MACs, log bytes)
    for matrix-like classes, (log bytes read, log bytes written) otherwise — takes the mean of
    its lower envelope (each node raised to the largest value of the nodes it dominates) and
    upper envelope (lowered to the smallest of the nodes dominating it), both non-decreasing
    along each axis, and interpolates that bilinearly: more work never takes less time. On a
    matrix-like class, a grid node of an intensity (MACs per byte) no sample has is priced at
    the nearest sampled intensity (its bytes moved into the sampled band). Beyond the grid a
    query is priced at its edge and time grows linearly with work."""

    op_class: str
    feats: np.ndarray  # (M, F)
    log_inv_tput: np.ndarray  # (M,)
    k: int = 3
    intensity_weight: float = 0.0  # see INTENSITY_WEIGHTS
    intensity_range: tuple[float, float] = (0.0, 0.0)  # log MACs/byte, min and max (MAC class)
    axes: tuple[np.ndarray, np.ndarray] | None = None  # grid coordinates, built on first use
    log_t: np.ndarray | None = None  # (X, Y) monotone log time at the grid nodes

    @classmethod
    def fit(cls, op_class: str, data: OpClassData, cold: bool = False) -> _SampleCurve:
        """A MAC class keeps the intensity weight of :data:`INTENSITY_WEIGHTS` with the lowest
        leave-one-out error on its own samples (ties: the first); it needs more samples than
        neighbours to choose, else takes 0."""
        s = np.asarray(data.samples, dtype=np.float64)  # (M, 4)
        times = np.asarray(data.cold_s, dtype=np.float64) if cold else s[:, 3]  # (M,)
        macs, br, bw, t = s[:, 0], s[:, 1], s[:, 2], np.maximum(times, 1e-9)
        log_inv = np.log(t / _work(op_class, macs, br, bw))
        k = min(3, len(s))
        weights = INTENSITY_WEIGHTS if op_class in MAC_CLASSES and len(s) > k + 1 else (0.0,)
        weight = weights[0] if len(weights) == 1 else min(
            weights, key=lambda w: _loo_error(_features(op_class, macs, br, bw, w), log_inv, k))
        feats = _features(op_class, macs, br, bw, weight)
        intensity = np.log(macs + _EPS) - np.log(br + bw + _EPS)
        return cls(op_class, feats, log_inv, k=k, intensity_weight=weight,
                   intensity_range=(float(intensity.min()), float(intensity.max())))

    def raw(self, macs: np.ndarray, br: np.ndarray, bw: np.ndarray) -> np.ndarray:
        """Seconds by the nearest samples alone (not monotone in work)."""
        # a query beyond the sampled range is moved to its edge (each feature clipped to the
        # samples' range), so its neighbours and their weights stop changing with size there:
        # the edge throughput is kept and time grows linearly with work
        q = np.clip(_features(self.op_class, macs, br, bw, self.intensity_weight),
                    self.feats.min(0), self.feats.max(0))  # (N, F)
        log_inv = _knn_log_inv(_distances(q, self.feats), self.log_inv_tput, self.k)
        return np.exp(log_inv) * _work(self.op_class, macs, br, bw)

    def _grid_coords(self, macs: np.ndarray, br: np.ndarray, bw: np.ndarray
                     ) -> tuple[np.ndarray, np.ndarray]:
        if self.op_class in MAC_CLASSES:
            return np.log(macs + _EPS), np.log(br + bw + _EPS)
        return np.log(br + _EPS), np.log(bw + _EPS)

    def _from_coords(self, x: np.ndarray, y: np.ndarray
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(macs, bytes read, bytes written) at grid coordinates."""
        if self.op_class in MAC_CLASSES:
            lo, hi = self.intensity_range  # keep the node's intensity within the sampled band
            y = np.clip(y, x - hi, x - lo)
            return np.exp(x) - _EPS, np.exp(y) - _EPS, np.zeros_like(x)
        return np.zeros_like(x), np.exp(x) - _EPS, np.exp(y) - _EPS

    def _linear(self, q: np.ndarray) -> np.ndarray:
        """Log inverse throughput interpolated linearly among the samples at features ``q``
        (N, F); NaN outside their hull."""
        feats, idx = np.unique(self.feats, axis=0, return_inverse=True)
        log_inv = np.bincount(idx.ravel(), self.log_inv_tput) / np.bincount(idx.ravel())
        out = np.full(len(q), np.nan)
        if len(feats) < 2:
            return out
        centred = feats - feats.mean(0)
        _, sv, vt = np.linalg.svd(centred, full_matrices=False)
        if len(feats) >= 3 and sv[-1] > 1e-6 * sv[0]:  # a 2-D cloud: triangles
            try:
                return np.asarray(LinearNDInterpolator(feats, log_inv)(q), dtype=np.float64)
            except QhullError:
                pass
        # on a line: interpolate along it, for queries on it
        t = centred @ vt[0]
        order = np.argsort(t)
        tq = (q - feats.mean(0)) @ vt[0]
        off = np.linalg.norm((q - feats.mean(0)) - np.outer(tq, vt[0]), axis=1)
        on = (off <= 1e-6 + 1e-3 * sv[0]) & (tq >= t.min()) & (tq <= t.max())
        out[on] = np.interp(tq[on], t[order], log_inv[order])
        return out

    def _build_grid(self) -> tuple[tuple[np.ndarray, np.ndarray], np.ndarray]:
        if self.op_class in MAC_CLASSES:
            x_s = self.feats[:, 0]
            # the samples' log bytes, from their features
            y_s = (self.feats[:, 1] if not self.intensity_weight
                   else x_s - self.feats[:, 1] / self.intensity_weight)
        else:
            x_s, y_s = self.feats[:, 0], self.feats[:, 1]
        # evenly spaced nodes, and the samples' own coordinates (a sample is a node)
        axes = tuple(np.unique(np.concatenate([
            np.linspace(v.min(), v.max(), max(2, int(np.ceil(np.ptp(v) / GRID_STEP)) + 1)), v]))
            for v in (x_s, y_s))
        gx, gy = np.meshgrid(axes[0], axes[1], indexing="ij")
        work = self._from_coords(gx.ravel(), gy.ravel())
        raw = np.log(np.maximum(self.raw(*work), 1e-30))
        inside = self._linear(_features(self.op_class, *work, self.intensity_weight))
        ok = np.isfinite(inside)
        raw[ok] = inside[ok] + np.log(_work(self.op_class, *work))[ok]
        raw = raw.reshape(gx.shape)
        lower = _cumulative(raw, np.maximum, reverse=False)
        upper = _cumulative(raw, np.minimum, reverse=True)
        return (axes[0], axes[1]), 0.5 * (lower + upper)

    def __call__(self, macs: np.ndarray, br: np.ndarray, bw: np.ndarray) -> np.ndarray:
        if self.log_t is None or self.axes is None:
            self.axes, self.log_t = self._build_grid()
        (ax, ay), g = self.axes, self.log_t
        x, y = self._grid_coords(macs, br, bw)
        xc, yc = np.clip(x, ax[0], ax[-1]), np.clip(y, ay[0], ay[-1])
        i = np.clip(np.searchsorted(ax, xc, side="right") - 1, 0, max(len(ax) - 2, 0))
        j = np.clip(np.searchsorted(ay, yc, side="right") - 1, 0, max(len(ay) - 2, 0))
        i1, j1 = np.minimum(i + 1, len(ax) - 1), np.minimum(j + 1, len(ay) - 1)
        fx = np.where(ax[i1] > ax[i], (xc - ax[i]) / np.maximum(ax[i1] - ax[i], 1e-300), 0.0)
        fy = np.where(ay[j1] > ay[j], (yc - ay[j]) / np.maximum(ay[j1] - ay[j], 1e-300), 0.0)
        log_t = ((1 - fx) * (1 - fy) * g[i, j] + fx * (1 - fy) * g[i1, j]
                 + (1 - fx) * fy * g[i, j1] + fx * fy * g[i1, j1])
        # beyond the grid: the edge's time, scaled by the work the clipping removed
        edge = self._from_coords(xc, yc) if self.op_class in MAC_CLASSES else (
            np.zeros_like(xc), np.exp(xc) - _EPS, np.exp(yc) - _EPS)
        scale = _work(self.op_class, macs, br, bw) / _work(self.op_class, *edge)
        out: np.ndarray = np.exp(log_t) * np.where((x != xc) | (y != yc), scale, 1.0)
        return out


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
    return hot_s + np.clip(cold_fraction, 0.0, 1.0) * np.maximum(cold_s - hot_s, 0.0)


_DTYPE_KEYS = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16", "float64": "fp64"}


class DeviceModel:
    """Predicts device time per kernel for one DeviceProfile (curves built once)."""

    def __init__(self, device: DeviceProfile, dtype: str = "fp32", framework: str = "") -> None:
        self.device = device
        self.dtype = dtype  # the prediction's dtype: "tf32" makes fp32 kernels use tf32 params
        self.framework = framework  # prefers "<framework>/<class>" curves where the profile has
        self._curves: dict[str, _SampleCurve | Roofline] = {}
        self._cold: dict[str, _SampleCurve] = {}  # the same samples timed with cold operands
        self.cache = CacheModel.from_params(device.cache, framework)
        self._peak_macs_per_s, self._peak_bytes_per_s = measured_peaks(device)
        for name, data in device.op_classes.items():
            if data.model == "samples":
                base = name.split("/")[-1].split(":")[0].split("@")[0]
                self._curves[name] = _SampleCurve.fit(base, data)
                if data.cold_s:
                    self._cold[name] = _SampleCurve.fit(base, data, cold=True)
            else:
                self._curves[name] = Roofline(dict(data.params))
        # whether some of the framework's own curves lack cold samples (see
        # _borrow_cold_penalty); False for eager and every profile without own curves
        own = f"{framework}/"
        self._borrows = bool(framework) and bool(self._cold) and any(
            n.startswith(own) and n not in self._cold for n in self._curves)

    def _key(self, op_class: str, variant: str, op: str, own: bool = True) -> str:
        """The most specific curve: ``@op``, then ``:variant``, then the class — first among the
        framework's own curves (``<framework>/...``, measured through its runtime; skipped when
        ``own`` is false), then among the shared ones."""
        prefixes = (f"{self.framework}/", "") if self.framework and own else ("",)
        name = op_name(op) if op else ""
        levels = [f"{op_class}@{name}"] if name else []
        levels += [f"{op_class}:{v}" for v in (variant, "math" if variant == "math_inplace"
                                                else "") if v]
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
        cold-operand data. Each is a pure function of the kernel (cacheable per kernel)."""
        warns: list[str] = [] if warnings is None else warnings
        n = len(kernels)
        if n == 0:
            return np.zeros(0), np.zeros(0)
        classes = np.array([self._key(k.op_class, k.variant, k.members[0] if k.members else "")
                            for k in kernels])
        dtypes = np.array([self._math_dtype(k.dtype) for k in kernels])
        macs = np.array([k.macs for k in kernels], dtype=np.float64)
        br = np.array([k.bytes_read for k in kernels], dtype=np.float64)
        bw = np.array([k.bytes_written for k in kernels], dtype=np.float64)
        # steps are priced on curves of pre-packed GEMMs only: a framework's own (ONNX Runtime's
        # MLAS); eager's GEMM samples re-pack their weights on every call, which a fused layer
        # does once, so there the layer stays one GEMM over all its tokens
        own = f"{self.framework}/"
        traits = [steps_of(k.variant) if str(c).startswith(own) else (1, 0.0)
                  for k, c in zip(kernels, classes)]
        if all(t[0] == 1 for t in traits):
            return self._times(kernels, classes, dtypes, macs, br, bw, warns)
        steps = np.array([t[0] for t in traits], dtype=np.float64)
        # fused recurrent layers: the input projection is one GEMM over all tokens, the
        # recurrent one runs step after step, each step reading the recurrent weights whole
        rec = np.array([t[1] for t in traits])
        wts = np.array([k.bytes_weights for k in kernels], dtype=np.float64)
        act = np.maximum(br - wts, 0.0)
        hot, cold = self._times(kernels, classes, dtypes, macs * (1 - rec),
                                wts * (1 - rec) + act, bw, warns)
        r = np.flatnonzero(steps > 1)
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
        """(hot, cold) seconds of kernels of these classes doing this work, floored."""
        n = len(kernels)
        hot, cold = np.zeros(n), np.zeros(n)
        for cls in np.unique(classes):
            name = self._curve_name(str(cls), warns)
            curve = self._curves[name]
            for dt in np.unique(dtypes[classes == cls]):
                sel = (classes == cls) & (dtypes == dt)
                if isinstance(curve, Roofline):
                    hot[sel] = curve(macs[sel], br[sel], bw[sel], str(dt))
                else:
                    hot[sel] = curve(macs[sel], br[sel], bw[sel])
                cold[sel] = (self._cold[name](macs[sel], br[sel], bw[sel]) if name in self._cold
                             else hot[sel])
        self._borrow_cold_penalty(kernels, classes, hot, cold, macs, br, bw)
        floor = np.full(n, self.device.kernel_floor_s)
        if self._peak_macs_per_s > 0:
            floor = np.maximum(floor, macs / self._peak_macs_per_s)
        if self._peak_bytes_per_s > 0:
            floor = np.maximum(floor, (br + bw) / self._peak_bytes_per_s)
        return np.maximum(hot, floor), np.maximum(cold, floor)

    def _borrow_cold_penalty(self, kernels: Sequence[Kernel], classes: np.ndarray,
                             hot: np.ndarray, cold: np.ndarray, macs: np.ndarray,
                             br: np.ndarray, bw: np.ndarray) -> None:
        """A kernel on a framework's own curve without cold samples (ONNX Runtime's: its
        worker threads sleep through a cache flush, so a flushed sample times their wake-up;
        inductor's generated loops) borrows a cold penalty ``t_cold − t_hot`` from the shared
        curves: streaming bytes from memory costs what the memory system charges, whichever
        loop reads them. A memory-bound kernel takes the penalty of the shared curve it would
        otherwise use. A MAC kernel takes that of a shared reduction reading its bytes
        (:data:`STREAM_CLASS`: reads, barely writes, like a GEMM streaming its weights), not
        that of eager's GEMM/conv: eager's cold samples include the library's per-call weight
        packing from cold memory, which runtimes with pre-packed weights (ONNX Runtime) do not
        pay — borrowed, that penalty over-predicted ONNX Runtime's CNNs up to 3×. In place."""
        if not self._borrows:
            return
        prefix = f"{self.framework}/"
        own = np.array([str(c).startswith(prefix) and str(c) not in self._cold
                        for c in classes])
        if not own.any():
            return
        idx = np.flatnonzero(own)
        shared = np.array([STREAM_CLASS if kernels[i].op_class in MAC_CLASSES else
                           self._key(kernels[i].op_class, kernels[i].variant,
                                     kernels[i].members[0] if kernels[i].members else "",
                                     own=False) for i in idx])
        for name in np.unique(shared):
            name = str(name)
            if name not in self._cold or not isinstance(self._curves.get(name), _SampleCurve):
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
