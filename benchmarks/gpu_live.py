"""Compiled frameworks and LLM decode steps on a live GPU: predictions first, then measurements.

    # on any machine (no GPU needed), before measuring: the predictions, written to a CSV
    python benchmarks/gpu_live.py predict --gpu h200 \\
        --host benchmarks/results/gpu-h100/h100-profile-v2.json --out predicted.csv
    # on the GPU machine: the measurements (and inductor's generated code, kernel counts)
    python benchmarks/gpu_live.py measure --stage decode --out-dir OUT
    python benchmarks/gpu_live.py measure --stage zoo --out-dir OUT
    # anywhere: predicted against measured
    python benchmarks/gpu_live.py report predicted.csv OUT/decode.csv OUT/zoo.csv --out summary.md

What is measured, per point, on the GPU with CUDA events (``ftmodel.measure.measure_interleaved``:
every framework and batch of one model in the same interleaved rounds, the fastest round's
median):

* ``zoo``: models of ftmodel's validation corpus (``ftmodel.tools.corpus``; held-out and tuning
  halves both) at ``--batches`` under eager, ``cudagraphs`` (one eager forward captured with
  ``torch.cuda.graph`` and replayed), ``inductor`` (``torch.compile(dynamic=False)``) and
  ``inductor-cudagraphs`` (``mode="reduce-overhead"``). Also counted: the GPU kernels of one call
  (``torch.profiler``, kernels and memsets/memcpys apart) and, for the compiled frameworks, the
  Triton kernels and extern calls in inductor's generated wrapper code, which is kept.
* ``decode``: one decode step of a Llama-3.2-1B-shaped causal LM (random weights, fp16, ``DECODE``)
  with ``context`` tokens cached per sequence: eager with a ``DynamicCache`` (what ``generate``
  uses) and with a ``StaticCache``, the static-cache step captured as a CUDA graph, and compiled
  (both modes) on the static cache, as serving recipes run it.

Models are built with random weights; nothing is downloaded. The predictions come from ftmodel's
public API only (``Predictor``), on a built-in spec-sheet GPU profile with a host half given by
``--host`` (or the profile's own), so none of them depends on a number measured here.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
import tarfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ftmodel.frameworks.cudagraphs import capture_forward  # noqa: E402

# corpus models, held-out and tuning halves alternating (a cut-short run keeps both)
ZOO_MODELS = ("regnet_x_400mf@112", "resnet34@96", "bert-6x384@64", "distilbert-4x384@96",
              "vit_small@96", "convnext_tiny@64")
ZOO_FRAMEWORKS = ("eager", "cudagraphs", "inductor", "inductor-cudagraphs")
# Llama-3.2-1B's shape (1.24 B parameters with tied embeddings), random weights
DECODE: dict[str, Any] = dict(hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
                              num_attention_heads=32, num_key_value_heads=8, vocab_size=128256,
                              max_position_embeddings=4096, tie_word_embeddings=True,
                              bos_token_id=0, eos_token_id=0)
DECODE_NAME = "llama-1b-shape"
# (framework, cache) pairs of the decode step
DECODE_VARIANTS = (("eager", "dynamic"), ("eager", "static"), ("cudagraphs", "static"),
                   ("inductor-cudagraphs", "static"), ("inductor", "static"))
FIELDS = ("kind", "model", "framework", "cache", "context", "batch", "measured_s", "spread",
          "kernels", "memops", "triton_kernels", "extern_calls", "compile_s", "note")


def _decode_model(device: str, tiny: bool = False) -> torch.nn.Module:
    """The decode model; ``tiny``: 2 layers of width 256 (a dry run of this script)."""
    import transformers
    cfg = dict(DECODE, **(dict(hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                                num_attention_heads=8, num_key_value_heads=2, vocab_size=1000)
                          if tiny else {}))
    with torch.device(device):
        model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**cfg))
    return model.to(torch.float16).eval()


def _silence_dynamo() -> None:
    import torch._dynamo.config as cfg
    for name in ("recompile_limit", "cache_size_limit", "accumulated_recompile_limit",
                 "accumulated_cache_size_limit"):
        if hasattr(cfg, name):
            setattr(cfg, name, 256)


# ---- measure (on the GPU) ---------------------------------------------------------------------

def _profile_counts(fn: Callable[[], object]) -> tuple[int, int]:
    """GPU kernels and memory operations (memset, memcpy) of one call, by torch.profiler."""
    from torch.profiler import ProfilerActivity, profile
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    kernels = memops = 0
    for e in prof.events():
        if str(e.device_type).endswith("CUDA"):
            if e.name.lower().startswith(("memset", "memcpy")):
                memops += 1
            else:
                kernels += 1
    return kernels, memops


def _compile(model: torch.nn.Module, framework: str, args: tuple[Any, ...],
             kwargs: dict[str, Any], code_dir: Path, tag: str) -> tuple[Callable[[], object],
                                                                         dict[str, Any]]:
    """torch.compile ``model`` for ``framework``; the compiled call, its codes' counts."""
    from torch._inductor.utils import run_and_get_code

    from ftmodel.frameworks.inductor_code import parse_wrapper
    mode = "reduce-overhead" if framework == "inductor-cudagraphs" else None
    t0 = time.perf_counter()
    with torch.no_grad():  # lazily made buffers (a static KV cache) made outside any graph
        model(*args, **kwargs)
    compiled = torch.compile(model, mode=mode, dynamic=False)

    def step() -> object:
        if mode is not None:  # each call a new step of cudagraph trees
            torch.compiler.cudagraph_mark_step_begin()
        return compiled(*args, **kwargs)
    with torch.no_grad():
        if mode is not None:
            torch.compiler.cudagraph_mark_step_begin()
        _, codes = run_and_get_code(compiled, *args, **kwargs)
        for _ in range(3):  # cudagraph trees record on a later call
            step()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    info: dict[str, Any] = {"compile_s": round(time.perf_counter() - t0, 2)}
    triton = extern = 0
    for i, code in enumerate(codes):
        (code_dir / f"{tag}-{i}.py").write_text(code)
        try:
            calls = parse_wrapper(code, i)
            triton += sum(1 for c in calls if c.kind == "generated")
            extern += sum(1 for c in calls if c.kind in ("extern", "fallback"))
        except Exception as err:  # the count is a by-product: keep the measurement
            info["note"] = f"wrapper not parsed: {type(err).__name__}: {err}"[:200]
    if codes:
        info.update(triton_kernels=triton, extern_calls=extern)
    else:  # inductor's FX graph cache served it: no code generated, nothing to count
        info["note"] = "compiled from inductor's cache (no generated code to count)"

    def call() -> object:
        with torch.no_grad():
            return step()
    return call, info


class _Rows:
    """Rows appended to a CSV as they are measured (a run cut short keeps what it measured)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        with open(path, "w", newline="") as f:
            csv.DictWriter(f, fieldnames=FIELDS).writeheader()

    def add(self, rows: list[dict[str, Any]]) -> None:
        with open(self.path, "a", newline="") as f:
            w = csv.DictWriter(f, fieldnames=FIELDS, extrasaction="ignore")
            for r in rows:
                w.writerow(r)


def _measure_points(points: dict[tuple[Any, ...], tuple[Callable[[], object], dict[str, Any]]],
                    rounds: int, device: str) -> list[dict[str, Any]]:
    from ftmodel.measure import measure_interleaved
    fns = {k: fn for k, (fn, _) in points.items()}
    measured = measure_interleaved(fns, device=device, rounds=rounds, round_s=0.05, warmup=3,
                                   max_reps=100)
    rows = []
    for key, (fn, info) in points.items():
        m = measured[key]
        row = dict(info, measured_s=m.time_s, spread=round(m.spread, 4))
        if device.startswith("cuda"):
            row["kernels"], row["memops"] = _profile_counts(fn)
        rows.append(row)
    return rows


def measure_zoo(out: Path, batches: list[int], rounds: int, device: str, models: list[str],
                frameworks: list[str]) -> None:
    from ftmodel.tools.corpus import get_corpus_model
    from ftmodel.tracing.inputs import resolve_inputs
    rows = _Rows(out / "zoo.csv")
    code_dir = out / "inductor-code"
    code_dir.mkdir(exist_ok=True)
    for name in models:
        zm = get_corpus_model(name)
        points: dict[tuple[Any, ...], tuple[Callable[[], object], dict[str, Any]]] = {}
        for fw in frameworks:
            for b in batches:
                torch.manual_seed(0)
                model = zm.build().eval().to(device)
                inp = resolve_inputs(model, zm.make_inputs(b), b).map(lambda t: t.to(device))
                info: dict[str, Any] = {"kind": "zoo", "model": name, "framework": fw,
                                        "batch": b}
                try:
                    if fw == "eager":
                        def call(m: Any = model, i: Any = inp) -> object:
                            with torch.no_grad():
                                return m(*i.args, **i.kwargs)
                        fn: Callable[[], object] = call
                    elif fw == "cudagraphs":
                        fn = capture_forward(model, inp.args, inp.kwargs)
                    else:
                        fn, extra = _compile(model, fw, inp.args, inp.kwargs, code_dir,
                                             f"{name.replace('@', '_')}-{fw}-b{b}")
                        info.update(extra)
                except Exception as err:
                    rows.add([dict(info, note=f"failed: {type(err).__name__}: {err}"[:300])])
                    print(f"{name} {fw} b{b}: {type(err).__name__}: {err}"[:400], flush=True)
                    continue
                points[(fw, b)] = (fn, info)
        got = _measure_points(points, rounds, device)
        rows.add(got)
        print(f"{name}: " + "  ".join(f"{r['framework']} b{r['batch']} "
                                      f"{r['measured_s'] * 1e3:.3f} ms" for r in got), flush=True)
        _pack(out)
        del points
        torch._dynamo.reset()
        if device.startswith("cuda"):
            torch.cuda.empty_cache()


def _decode_inputs(model: torch.nn.Module, context: int, batch: int, cache: str,
                   device: str) -> dict[str, Any]:
    import transformers

    import ftmodel
    kw = ftmodel.inputs.decode(context, cache=cache).for_model(model, batch)
    for k in ("input_ids", "attention_mask", "position_ids", "cache_position"):
        kw[k] = kw[k].to(device)
    if cache == "dynamic":
        cfg = model.config
        heads = cfg.num_key_value_heads
        shape = (batch, heads, context, cfg.hidden_size // cfg.num_attention_heads)
        key = next(k for k in kw if k in ("cache", "past_key_values"))
        kw[key] = transformers.DynamicCache(
            [(torch.randn(shape, dtype=torch.float16, device=device),
              torch.randn(shape, dtype=torch.float16, device=device))
             for _ in range(cfg.num_hidden_layers)], config=cfg)
    return kw


def _rewinding(fn: Callable[[], object], cache: Any, every: int = 16) -> Callable[[], object]:
    """``fn`` with the static cache's write position set back to 0 every ``every`` calls.

    transformers' ``StaticLayer`` (5.x) writes each step at its own counter
    (``cumulative_length``, a tensor advanced in place, also inside a captured graph), not at
    ``cache_position``: without a rewind, step ``max_cache_len + 1`` indexes out of bounds. The
    step's kernels and shapes do not depend on the position; the rewind is one small in-place
    kernel per layer every ``every`` calls."""
    calls = [0]

    def call() -> object:
        calls[0] += 1
        if calls[0] % every == 0:
            for layer in getattr(cache, "layers", ()):
                pos = getattr(layer, "cumulative_length", None)
                if isinstance(pos, torch.Tensor):
                    pos.fill_(0)
        return fn()
    return call


def measure_decode(out: Path, contexts: list[int], batches: list[int], rounds: int,
                   device: str, variants: list[tuple[str, str]], tiny: bool = False) -> None:
    rows = _Rows(out / "decode.csv")
    code_dir = out / "inductor-code"
    code_dir.mkdir(exist_ok=True)
    torch.manual_seed(0)
    model = _decode_model(device, tiny)
    for c in contexts:
        # one variant at a time, its batches interleaved, rows written as soon as measured:
        # compiling takes most of the time, and a run cut short keeps the variants it finished
        for fw, cache in variants:
            points: dict[tuple[Any, ...], tuple[Callable[[], object], dict[str, Any]]] = {}
            for b in batches:
                info: dict[str, Any] = {"kind": "decode", "model": DECODE_NAME, "framework": fw,
                                        "cache": cache, "context": c, "batch": b}
                kw = _decode_inputs(model, c, b, cache, device)
                try:
                    fn = _decode_step(model, fw, cache, kw, info, code_dir,
                                      f"{DECODE_NAME}-{fw}-c{c}-b{b}")
                except Exception as err:
                    rows.add([dict(info, note=f"failed: {type(err).__name__}: {err}"[:300])])
                    print(f"decode {fw}/{cache} c{c} b{b}: {type(err).__name__}: {err}"[:400],
                          flush=True)
                    traceback.print_exc(limit=3)
                    continue
                if cache == "static":
                    fn = _rewinding(fn, next(v for k, v in kw.items()
                                             if k in ("cache", "past_key_values")))
                points[(fw, cache, b)] = (fn, info)
            got = _measure_points(points, rounds, device) if points else []
            rows.add(got)
            for r in got:
                print(f"decode {r['framework']}/{r['cache']} c{c} b{r['batch']}: "
                      f"{r['measured_s'] * 1e3:.3f} ms, {r.get('kernels')} kernels, compiled in "
                      f"{r.get('compile_s', '-')} s", flush=True)
            _pack(out)
            del points
            if fw.startswith("inductor"):
                torch._dynamo.reset()


def _decode_step(model: torch.nn.Module, fw: str, cache: str, kw: dict[str, Any],
                 info: dict[str, Any], code_dir: Path, tag: str) -> Callable[[], object]:
    """The callable running one decode step of ``model`` under ``fw``."""
    if fw == "eager" and cache == "dynamic":
        pkv = next(v for k, v in kw.items() if k in ("cache", "past_key_values"))

        def step() -> object:
            with torch.no_grad():
                out = model(**kw)
            pkv.crop(-1)  # back to `context` positions
            return out
        return step
    if fw == "eager":
        def call() -> object:
            with torch.no_grad():
                return model(**kw)
        return call
    if fw == "cudagraphs":
        try:
            return capture_forward(model, (), kw)
        except Exception as err:  # a mask check syncing inside the capture
            print(f"capture with attention_mask failed ({err!r:.200}); again without it",
                  flush=True)
            torch.cuda.synchronize()
            info["note"] = "captured without attention_mask"
            return capture_forward(model, (), {k: v for k, v in kw.items()
                                               if k != "attention_mask"})
    fn, extra = _compile(model, fw, (), kw, code_dir, tag)
    info.update(extra)
    return fn


def _pack(out: Path) -> None:
    """The generated code as one archive (the files that come back are few)."""
    code_dir = out / "inductor-code"
    if code_dir.is_dir():
        with tarfile.open(out / "inductor-code.tar.gz", "w:gz") as tar:
            tar.add(code_dir, arcname="inductor-code")


# ---- predict (anywhere) -----------------------------------------------------------------------

def predict(gpu: str, host: str | None, out_path: Path, batches: list[int], contexts: list[int],
            decode_batches: list[int], models: list[str], frameworks: list[str],
            variants: list[tuple[str, str]], tiny: bool = False) -> None:
    import ftmodel
    from ftmodel.api import Predictor
    from ftmodel.errors import FtmodelError
    from ftmodel.tools.corpus import get_corpus_model, is_held_out
    _silence_dynamo()
    fields = ("kind", "model", "half", "framework", "cache", "context", "batch", "predicted_s",
              "overhead_s", "compute_s", "n_launches", "macs", "note")
    rows: list[dict[str, Any]] = []
    for fw in frameworks:
        pred = Predictor(fw, gpu, host=host)
        for name in models:
            zm = get_corpus_model(name)
            torch.manual_seed(0)
            model = zm.build().eval()
            half = "held-out" if is_held_out(name) else "tuning"
            try:
                ps = pred.predict(model, batches, zm.make_inputs)
            except FtmodelError as err:
                rows.append({"kind": "zoo", "model": name, "half": half, "framework": fw,
                             "note": f"{type(err).__name__}: {err}"[:300]})
                continue
            for p in ps:
                rows.append({"kind": "zoo", "model": name, "half": half, "framework": fw,
                             "batch": p.batch, "predicted_s": p.latency_s,
                             "overhead_s": p.overhead_s, "compute_s": p.compute_s,
                             "n_launches": p.n_launches, "macs": p.macs})
            print(f"{fw} {name}: " + " ".join(f"b{p.batch} {p.latency_s * 1e3:.3f}" for p in ps),
                  flush=True)
    torch.manual_seed(0)
    llm = _decode_model("cpu", tiny).float()  # inductor compiles real weights; dtype below
    for fw, cache in variants:
        for c in contexts:
            try:  # a calibrated profile may lack fp16
                ps = Predictor(fw, gpu, host=host, dtype="fp16").predict(
                    llm, decode_batches, ftmodel.inputs.decode(c, cache=cache))
            except FtmodelError as err:
                rows.append({"kind": "decode", "model": DECODE_NAME, "framework": fw,
                             "cache": cache, "context": c, "note": str(err)[:300]})
                continue
            for p in ps:
                rows.append({"kind": "decode", "model": DECODE_NAME, "half": "held-out",
                             "framework": fw, "cache": cache, "context": c, "batch": p.batch,
                             "predicted_s": p.latency_s, "overhead_s": p.overhead_s,
                             "compute_s": p.compute_s, "n_launches": p.n_launches,
                             "macs": p.macs})
            print(f"decode {fw}/{cache} c{c}: " + " ".join(
                f"b{p.batch} {p.latency_s * 1e3:.3f}" for p in ps), flush=True)
    with open(out_path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        w.writerows(rows)


# ---- report -------------------------------------------------------------------------------------

def _key(r: dict[str, str]) -> tuple[str, ...]:
    return (r["kind"], r["model"], r["framework"], r.get("cache") or "",
            r.get("context") or "", r["batch"])


def report(predicted: Path, measured: list[Path], out_path: Path) -> None:
    import numpy as np
    from scipy.stats import spearmanr
    preds = {_key(r): r for r in csv.DictReader(open(predicted)) if r.get("predicted_s")}
    joined = []
    for path in measured:
        for r in csv.DictReader(open(path)):
            p = preds.get(_key(r))
            if p and r.get("measured_s"):
                joined.append((p, dict(r, file=path.stem)))
    lines = [f"# Predicted ({predicted.name}) against measured ({', '.join(m.name for m in measured)})",
             "", "| measured | kind | framework | half | points | median APE | P90 | ρ | "
             "median pred/meas |", "|---|---|---|---|---|---|---|---|---|"]
    groups: dict[tuple[str, str, str, str], list[tuple[float, float]]] = {}
    for p, r in joined:
        pair = (float(p["predicted_s"]), float(r["measured_s"]))
        fw = r["framework"] + (f"/{r['cache']}" if r.get("cache") else "")
        for half in (p["half"], "all"):
            groups.setdefault((r["file"], r["kind"], fw, half), []).append(pair)
    for (label, kind, fw, half), pairs in sorted(groups.items()):
        pr, me = np.array(pairs).T
        ape = np.abs(pr - me) / me
        rho = spearmanr(pr, me).statistic if len(pairs) > 2 else float("nan")
        lines.append(f"| {label} | {kind} | {fw} | {half} | {len(pairs)} | {np.median(ape):.1%} | "
                     f"{np.percentile(ape, 90):.1%} | {rho:.3f} | {np.median(pr / me):.2f} |")
    lines += ["", "| measured | model | framework | context | batch | predicted ms | measured ms | "
              "ratio | launches predicted | kernels profiled | triton + extern |",
              "|---|---|---|---|---|---|---|---|---|---|---|"]
    for p, r in joined:
        fw = r["framework"] + (f"/{r['cache']}" if r.get("cache") else "")
        pr, me = float(p["predicted_s"]), float(r["measured_s"])
        gen = (f"{r['triton_kernels']} + {r['extern_calls']}" if r.get("triton_kernels") else "")
        lines.append(f"| {r['file']} | {r['model']} | {fw} | {r.get('context') or ''} | "
                     f"{r['batch']} | {pr * 1e3:.3f} | {me * 1e3:.3f} | {pr / me:.2f} | "
                     f"{p['n_launches']} | {r.get('kernels') or ''} | {gen} |")
    out_path.write_text("\n".join(lines) + "\n")
    print(out_path.read_text())


def _ints(s: str) -> list[int]:
    return [int(x) for x in s.split(",") if x]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("measure")
    m.add_argument("--stage", choices=("zoo", "decode"), required=True)
    m.add_argument("--out-dir", required=True)
    m.add_argument("--device", default="cuda")
    m.add_argument("--rounds", type=int, default=5)
    m.add_argument("--threads", type=int, default=2, help="torch's CPU threads (as calibrated)")
    m.add_argument("--batches", default=None)
    m.add_argument("--contexts", default="1024")
    m.add_argument("--models", default=",".join(ZOO_MODELS))
    m.add_argument("--frameworks", default=",".join(ZOO_FRAMEWORKS))
    m.add_argument("--variants", default=",".join(f"{f}/{c}" for f, c in DECODE_VARIANTS))
    p = sub.add_parser("predict")
    p.add_argument("--gpu", default="h200")
    p.add_argument("--host", default=None)
    p.add_argument("--out", required=True)
    p.add_argument("--batches", default="1,32")
    p.add_argument("--decode-batches", default="1,16")
    p.add_argument("--contexts", default="1024")
    p.add_argument("--models", default=",".join(ZOO_MODELS))
    p.add_argument("--frameworks", default=",".join(ZOO_FRAMEWORKS))
    p.add_argument("--variants", default=",".join(f"{f}/{c}" for f, c in DECODE_VARIANTS))
    for sp in (m, p):
        sp.add_argument("--tiny", action="store_true", help="a 2-layer decode model (dry run)")
    r = sub.add_parser("report")
    r.add_argument("predicted")
    r.add_argument("measured", nargs="+")
    r.add_argument("--out", required=True)
    args = ap.parse_args()
    if args.cmd == "report":
        report(Path(args.predicted), [Path(x) for x in args.measured], Path(args.out))
        return
    variants = [tuple(v.split("/")) for v in args.variants.split(",") if v]
    if args.cmd == "predict":
        predict(args.gpu, args.host, Path(args.out), _ints(args.batches), _ints(args.contexts),
                _ints(args.decode_batches), args.models.split(","), args.frameworks.split(","),
                variants, args.tiny)  # type: ignore[arg-type]
        return
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    _silence_dynamo()
    torch.set_num_threads(args.threads)
    info = {"torch": torch.__version__, "device": (torch.cuda.get_device_name()
                                                   if args.device.startswith("cuda") else "cpu")}
    print(json.dumps(info), flush=True)
    if args.stage == "zoo":
        measure_zoo(out, _ints(args.batches or "1,32"), args.rounds, args.device,
                    args.models.split(","), args.frameworks.split(","))
    else:
        measure_decode(out, _ints(args.contexts), _ints(args.batches or "1,16"), args.rounds,
                       args.device, variants, args.tiny)  # type: ignore[arg-type]


if __name__ == "__main__":
    main()
