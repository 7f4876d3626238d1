"""Per-operator diagnosis: torch.profiler self-CPU time vs predicted time, for one model × batch.

    python benchmarks/diagnose.py --profile P.json --model gpt2-small4@64 --batch 16
    python benchmarks/diagnose.py --profile P.json --model fastvit_t8@128 --batch 16  # corpus
    python benchmarks/diagnose.py --profile P.json --model synthetic:cnn3 --by-class
    python benchmarks/diagnose.py --profile P.json --model timm:mobilevit_xs@128 --by-class
    python benchmarks/diagnose.py --profile P.json --model efficientnet_lite0@112 --batch 16 \
        --framework torchscript --by-class

Corpus models: diagnose the tuning half only (``ftmodel.tools.corpus.tuning()``); the held-out half is
measured and reported, never studied.

``synthetic:<name>`` takes one of the calibration's in-model networks
(``ftmodel.calibration.networks.synthetic_networks``: cnn0, transformer1, mlp2, ...);
``timm:<arch>@<side>`` a timm image model outside the corpus (random weights, ``side`` px
images): a sibling of a held-out family, studied in its place; ``path/to/file.py:factory`` a
network of one's own (``ftmodel validate``'s spec, inputs of ``--input-shape``).

Prints, per aten operator, the measured self CPU time (summed over calls, median of several
profiled passes) next to the predicted device time and kernel host cost; with ``--by-class``,
per op class, the inclusive time of the top-level aten calls (the profiler's own overhead of a
few µs per call included) next to the predicted host and device time of that class's kernels,
and the forward's wall time without the profiler. With ``--framework``, the framework's own artifact
(its runner) is profiled against its own Program: the operators it runs (TorchScript's
``prim::mkldnn_convolution``, ``aten::linear``, inductor's generated ``cpp_fused_*`` kernels,
profiled with ``torch._inductor.config.cpp.enable_kernel_profile``) are matched by name, and a
top-level call is one with no aten or prim operator above it. A tool for finding which op class
a profile mispredicts; it writes nothing.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable
from collections import defaultdict
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ftmodel.api import Predictor  # noqa: E402
from ftmodel.estimate.timeline import host_costs_s  # noqa: E402
from ftmodel.hardware.profile import read_profile  # noqa: E402
from ftmodel.tools.corpus import get_corpus_model, held_out, is_held_out  # noqa: E402
from ftmodel.errors import UnknownNameError  # noqa: E402
from ftmodel.tools.zoo import get_model  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--profile", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--framework", default="eager",
                    help="the framework whose artifact is profiled (eager, torchscript, "
                         "onnxruntime's ops are not aten calls and are not compared)")
    ap.add_argument("--input-shape", default=None,
                    help="one sample's shape (e.g. 3x128x128) for a path/to/file.py:factory model")
    ap.add_argument("--warmup", type=int, default=20,
                    help="calls before profiling (a frozen TorchScript graph runs its first few "
                         "calls unoptimised)")
    ap.add_argument("--by-class", action="store_true",
                    help="compare per op class (top-level aten calls) instead of per operator")
    ap.add_argument("--speed", choices=("profile", "now"), default="profile",
                    help="price at the calibration's recorded speed or at one probed now "
                         "(predict_latency's speed=)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    from ftmodel.measure import keep_heap
    keep_heap()  # the steady state the prediction models
    if args.framework == "inductor":  # its C++ kernels show in the profile under their names
        import torch._inductor.config as inductor_config
        inductor_config.cpp.enable_kernel_profile = True
    model, make_inputs = model_by_name(args.model, args.input_shape)
    pred = Predictor(args.framework, read_profile(args.profile), speed=args.speed)
    tr = pred.trace(model, make_inputs, args.batch)
    if pred.framework.runner is None:  # eager: the module itself
        prog = pred.framework.lower(tr)
        call = _caller(model, make_inputs(args.batch))
    else:
        prog = pred.lower(model, make_inputs, args.batch, tr)
        call = pred.framework.runner(model, make_inputs, args.batch, device="cpu",
                                     dtype="fp32")
    if args.by_class:
        _by_class(pred, prog, call, f"{args.model} b{args.batch} {args.framework}")
        return
    ks = pred.kernel_arrays(prog.kernels).device_s
    hs = host_costs_s(prog, pred.fw_host, [])
    pred_by_op: dict[str, list[float]] = defaultdict(lambda: [0, 0.0, 0.0])
    for k, d, h in zip(prog.kernels, ks, hs):
        name = k.members[0].replace("aten.", "aten::").rsplit(".", 1)[0]
        row = pred_by_op[name]
        row[0] += 1
        row[1] += d
        row[2] += h
    with torch.no_grad():
        for _ in range(args.warmup):
            call()
        from torch.profiler import ProfilerActivity, profile
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for _ in range(5):
                call()
    meas: dict[str, float] = defaultdict(float)
    for ev in prof.key_averages():
        key = _GRAPH_PREFIX.sub("", ev.key)  # inductor's kernel: graph_0_cpp_fused_...
        if key.startswith(("aten::", "prim::", "cpp_fused")):
            meas[key] += ev.self_cpu_time_total / 5 / 1e6
    total = sum(meas.values())
    print(f"{args.model} b{args.batch}: profiled aten self-CPU {total * 1e3:.2f} ms/pass; "
          f"predicted device {ks.sum() * 1e3:.2f} ms + host {hs.sum() * 1e3:.2f} ms")
    print(f"{'op':<44}{'n':>5}{'meas ms':>10}{'pred dev':>10}{'pred host':>10}")
    for op in sorted(set(meas) | set(pred_by_op), key=lambda o: -max(meas.get(o, 0),
                                                                     pred_by_op[o][1])):
        r = pred_by_op.get(op, [0, 0.0, 0.0])
        if meas.get(op, 0) < 2e-5 and r[1] < 2e-5:
            continue
        print(f"{op:<44}{int(r[0]):>5}{meas.get(op, 0) * 1e3:>10.3f}{r[1] * 1e3:>10.3f}"
              f"{r[2] * 1e3:>10.3f}")


_GRAPH_PREFIX = re.compile(r"^graph_\d+_")


def model_by_name(name: str, input_shape: str | None = None
                  ) -> tuple[torch.nn.Module, Callable[[int], Any]]:
    """(module, batch -> inputs) of a zoo model, a corpus model (tuning half only: a held-out
    name exits with a message), one of the calibration's synthetic networks
    (``synthetic:<name>``), a timm image model (``timm:<arch>@<side>``; one that is in the
    corpus's held-out half under the same architecture exits as its corpus name does) or a
    factory in a file (``path/to/file.py:factory``, inputs of ``input_shape``)."""
    if ".py:" in name:
        from ftmodel.tools.user_models import load_model, parse_input_shape
        shape = parse_input_shape(input_shape) if input_shape else None
        module, inputs = load_model(name, input_shape=shape)
        if not callable(inputs):
            raise SystemExit(f"{name}: pass --input-shape (its inputs are not batch -> inputs)")
        return module, inputs
    if name.startswith("timm:"):
        import timm
        from ftmodel.tools.zoo import image_inputs

        arch, _, side = name.split(":", 1)[1].partition("@")
        held = [m for m in held_out()  # deit_tiny@112 is timm's deit_tiny_patch16_224
                if arch == m.split("@")[0] or arch.startswith(m.split("@")[0] + "_")]
        if held:
            raise SystemExit(f"{name} is {held[0]} of the corpus's held-out half, which is "
                             "measured and reported, never studied")
        model: torch.nn.Module = timm.create_model(arch, pretrained=False).eval()
        return model, image_inputs(int(side or 224))
    if name.startswith("synthetic:"):
        from ftmodel.calibration.networks import synthetic_networks
        nets = {n.name: n for n in synthetic_networks(18)}
        net = nets[name.split(":", 1)[1]]
        return net.module, net.make_inputs
    try:
        zm = get_model(name)
    except UnknownNameError:
        zm = get_corpus_model(name)
        if is_held_out(zm.name):  # the held-out half is measured and reported, never studied
            raise SystemExit(f"{name} is in the corpus's held-out half, which is measured and "
                             "reported, never studied; pick a model of "
                             "ftmodel.tools.corpus.tuning()")
    return zm.build(), zm.make_inputs


def _caller(model: torch.nn.Module, x: Any) -> Callable[[], object]:
    if isinstance(x, dict):
        return lambda: model(**x)
    if isinstance(x, tuple):
        return lambda: model(*x)
    return lambda: model(x)


# the op class of a top-level aten call, by its name (as eager lowers it)
_TOP_LEVEL_CLASS = {
    "conv1d": "conv", "conv2d": "conv", "linear": "gemm", "matmul": "gemm", "addmm": "gemm",
    "bmm": "bmm", "batch_norm": "norm", "layer_norm": "norm", "group_norm": "norm",
    "scaled_dot_product_attention": "attention", "softmax": "softmax",
    "adaptive_avg_pool2d": "pool", "max_pool2d": "pool", "avg_pool2d": "pool",
    "embedding": "embedding", "mean": "reduction", "sum": "reduction",
    "mkldnn_convolution": "conv", "to_mkldnn": "copy", "to_dense": "copy"}
_VIEWS = {"view", "reshape", "permute", "transpose", "flatten", "select", "unbind", "t",
          "expand", "squeeze", "unsqueeze", "slice", "split", "chunk", "contiguous"}


def _top_level(ev: Any) -> bool:
    """An aten or prim operator call with no such call above it."""
    if not ev.name.startswith(("aten::", "prim::")):
        return False
    parent = ev.cpu_parent
    while parent is not None:
        if parent.name.startswith(("aten::", "prim::")):
            return False
        parent = parent.cpu_parent
    return True


def _by_class(pred: Predictor, prog: Any, call: Callable[[], object], title: str) -> None:
    import statistics
    import time

    from torch.profiler import ProfilerActivity, profile

    ks = pred.kernel_arrays(prog.kernels).device_s
    hs = host_costs_s(prog, pred.fw_host, [])
    predicted: dict[str, list[float]] = defaultdict(lambda: [0, 0.0, 0.0])
    for k, d, h in zip(prog.kernels, ks, hs):
        row = predicted["conv" if k.op_class == "conv_grouped" else k.op_class]
        row[0] += 1
        row[1] += d
        row[2] += h
    reps = 20
    with torch.no_grad():
        for _ in range(reps):
            call()
        walls = []
        for _ in range(7):
            t0 = time.perf_counter()
            for _ in range(reps):
                call()
            walls.append((time.perf_counter() - t0) / reps)
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for _ in range(reps):
                call()
    measured: dict[str, float] = defaultdict(float)
    for ev in prof.events():
        if _top_level(ev):
            op = ev.name.split("::", 1)[1].rstrip("_")
            cls = "view" if op in _VIEWS else _TOP_LEVEL_CLASS.get(op, "elementwise")
            measured[cls] += ev.cpu_time_total / reps / 1e6
    print(f"{title}: wall {statistics.median(walls) * 1e3:.2f} ms; profiled top-level aten "
          f"{sum(measured.values()) * 1e3:.2f} ms; predicted host {hs.sum() * 1e3:.2f} ms, "
          f"device {ks.sum() * 1e3:.2f} ms")
    print(f"{'class':<14}{'kernels':>8}{'meas ms':>10}{'pred host':>11}{'pred dev':>10}"
          f"{'gap/kernel us':>15}")
    for cls in sorted(set(measured) | set(predicted)):
        n, d, h = predicted.get(cls, [0, 0.0, 0.0])
        gap = (measured.get(cls, 0.0) - h - d) / max(n, 1)
        print(f"{cls:<14}{int(n):>8}{measured.get(cls, 0.0) * 1e3:>10.3f}{h * 1e3:>11.3f}"
              f"{d * 1e3:>10.3f}{gap * 1e6:>15.1f}")


if __name__ == "__main__":
    main()
