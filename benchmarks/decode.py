"""LLM decode steps on this CPU: predicted and measured in the same run.

    python benchmarks/decode.py --profile benchmarks/results/cpu-epyc/cpu-profile-23.json \\
        --frameworks eager,inductor --out-dir benchmarks/results/cpu-epyc/decode

Small causal LMs with random weights (a grouped-query-attention Llama, a Qwen2, a GPT-2; see
``MODELS``), one decode step (``inputs=ftmodel.inputs.decode(context=C)``: one new token for each
of ``batch`` sequences with ``C`` tokens in a ``DynamicCache``) at each context and batch. For each
framework and model, in one process with glibc's default malloc (a plain process, predicted with
``heap="plain"``): every point is predicted first, then measured — the model built with random
weights (compiled once by ``torch.compile`` for inductor), a cache of ``C`` random positions,
and the step timed by ``torch.utils.benchmark.Timer`` (3 rounds of ``--round-s``, the fastest
round's median), the cache cropped back to ``C`` after each step so every call appends to the
same length. These models were never used to choose anything in ftmodel.

Writes ``decode-<framework>.csv`` (one row per model × context × batch) and
``decode-summary.md``: median / P90 APE, Spearman ρ and the MACs proxy (``a + b·MACs`` fitted on
the same points), per framework, per model, per context and per batch.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from scipy.stats import spearmanr

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import ftmodel  # noqa: E402
from ftmodel.api import Predictor  # noqa: E402
from ftmodel.hardware.registry import load_profile  # noqa: E402
from ftmodel.measure import cpu_name  # noqa: E402

VOCAB = 4000


def _llama() -> torch.nn.Module:
    import transformers
    return transformers.LlamaForCausalLM(transformers.LlamaConfig(
        hidden_size=512, intermediate_size=1376, num_hidden_layers=4, num_attention_heads=8,
        num_key_value_heads=2, vocab_size=VOCAB, max_position_embeddings=2048,
        bos_token_id=0, eos_token_id=0))


def _qwen2() -> torch.nn.Module:
    import transformers
    return transformers.Qwen2ForCausalLM(transformers.Qwen2Config(
        hidden_size=384, intermediate_size=1024, num_hidden_layers=4, num_attention_heads=6,
        num_key_value_heads=2, vocab_size=VOCAB, max_position_embeddings=2048,
        bos_token_id=0, eos_token_id=0))


def _gpt2() -> torch.nn.Module:
    import transformers
    return transformers.GPT2LMHeadModel(transformers.GPT2Config(
        n_embd=512, n_layer=6, n_head=8, vocab_size=VOCAB, n_positions=2048,
        bos_token_id=0, eos_token_id=0))


MODELS: dict[str, Callable[[], torch.nn.Module]] = {
    "llama-gqa-4x512": _llama, "qwen2-gqa-4x384": _qwen2, "gpt2-6x512": _gpt2}


def _step(model: torch.nn.Module, run: Callable[..., Any], context: int, batch: int
          ) -> Callable[[], None]:
    """One decode step on a cache of ``context`` random positions, cropped back after it."""
    kw = ftmodel.inputs.decode(context).for_model(model, batch)
    cache = next(v for k, v in kw.items() if k in ("cache", "past_key_values"))
    for layer in cache.layers:
        layer.keys.normal_()
        layer.values.normal_()

    def step() -> None:
        with torch.no_grad():
            run(**kw)
        cache.crop(-1)  # drop the position the step appended
    return step


def _time(step: Callable[[], None], rounds: int, round_s: float) -> tuple[float, float]:
    from torch.utils.benchmark import Timer
    step()
    step()
    medians = [Timer(stmt="step()", globals={"step": step}).blocked_autorange(
        min_run_time=round_s).median for _ in range(rounds)]
    return min(medians), max(medians) / min(medians) - 1


def run(framework: str, profile: str, contexts: list[int], batches: list[int], rounds: int,
        round_s: float) -> list[dict[str, Any]]:
    pred = Predictor(framework, load_profile(profile))
    rows: list[dict[str, Any]] = []
    for name, make in MODELS.items():
        torch.manual_seed(0)
        model = make().eval()
        t0 = time.perf_counter()
        preds = {c: pred.predict(model, batches, ftmodel.inputs.decode(c)) for c in contexts}
        run_fn: Callable[..., Any] = model
        if framework == "inductor":
            # one compiled graph per context × batch: above dynamo's default of 8 recompiles
            # the later points would silently run eagerly
            torch._dynamo.config.recompile_limit = 64
            run_fn = torch.compile(model, backend="inductor", dynamic=False)
        for c in contexts:
            for p in preds[c]:
                measured, spread = _time(_step(model, run_fn, c, p.batch), rounds, round_s)
                rows.append({"model": name, "framework": framework, "context": c,
                             "batch": p.batch, "measured_s": measured, "spread": spread,
                             "predicted_s": p.latency_s, "ratio": p.latency_s / measured,
                             "ape": abs(p.latency_s - measured) / measured,
                             "overhead_s": p.overhead_s, "compute_s": p.compute_s,
                             "macs": p.macs, "n_launches": p.n_launches,
                             "tokens_per_s_measured": p.batch / measured,
                             "tokens_per_s_predicted": p.tokens_per_s})
            print(f"  {framework} {name} context {c}: " + "  ".join(
                f"b{r['batch']} {r['predicted_s'] * 1e3:.2f}/{r['measured_s'] * 1e3:.2f}"
                for r in rows if r["model"] == name and r["context"] == c)
                + f"  ({time.perf_counter() - t0:.0f} s)", flush=True)
    return rows


def repredict(path: Path, profile: str) -> list[dict[str, Any]]:
    """The points of a committed ``decode-<framework>.csv`` predicted again with the code of now
    (their measurements unchanged: not a same-run validation)."""
    old = list(csv.DictReader(open(path)))
    framework = old[0]["framework"]
    pred = Predictor(framework, load_profile(profile))
    rows: list[dict[str, Any]] = []
    for name, make in MODELS.items():
        torch.manual_seed(0)
        model = make().eval()
        for c in sorted({int(r["context"]) for r in old if r["model"] == name}):
            pts = [r for r in old if r["model"] == name and int(r["context"]) == c]
            batches = [int(r["batch"]) for r in pts]
            for r, p in zip(pts, pred.predict(model, batches, ftmodel.inputs.decode(c))):
                measured = float(r["measured_s"])
                rows.append(dict(r, predicted_s=p.latency_s, ratio=p.latency_s / measured,
                                 ape=abs(p.latency_s - measured) / measured,
                                 overhead_s=p.overhead_s, compute_s=p.compute_s, macs=p.macs,
                                 n_launches=p.n_launches, tokens_per_s_predicted=p.tokens_per_s,
                                 spread=float(r["spread"]), measured_s=measured,
                                 context=c, batch=int(r["batch"])))
    return rows


def _stats(rows: list[dict[str, Any]]) -> str:
    pred = np.array([r["predicted_s"] for r in rows])
    meas = np.array([r["measured_s"] for r in rows])
    macs = np.array([r["macs"] for r in rows], dtype=float)
    ape = np.abs(pred - meas) / meas
    a = np.stack([np.ones_like(macs), macs], axis=1)
    coef, *_ = np.linalg.lstsq(a, meas, rcond=None)
    proxy = np.abs(np.maximum(a @ coef, 1e-9) - meas) / meas
    rho = spearmanr(pred, meas).statistic if len(rows) > 2 else float("nan")
    return (f"{len(rows)} | {np.median(ape):.1%} | {np.percentile(ape, 90):.1%} | "
            f"{np.mean(ape <= 0.2):.0%} | {rho:.3f} | {np.median(pred / meas):.2f} | "
            f"{np.median(proxy):.1%}")


def summary(rows: list[dict[str, Any]], profile: str, command: str, took_s: float,
            title: str | None = None) -> str:
    head = ("| points | median APE | P90 | within ±20% | ρ | ratio | MACs proxy |\n"
            "|---|---|---|---|---|---|---|")
    out = [title or f"# Decode steps on {cpu_name()}", "",
           f"- date: {datetime.date.today()}; torch {torch.__version__}, "
           f"{torch.get_num_threads()} threads; " + (f"run took {took_s:.0f} s" if not title
                                                      else "predictions only"),
           f"- profile: `{profile}`", f"- command: `{command}`",
           f"- noise: median round spread "
           f"{statistics.median(r['spread'] for r in rows):.1%} (slowest / fastest round − 1)",
           "", "APE = |predicted − measured| / measured; ratio = median predicted / measured; "
           "the MACs proxy is `a + b·MACs` fitted on the same points.", ""]
    for fw in sorted({r["framework"] for r in rows}):
        sel = [r for r in rows if r["framework"] == fw]
        out += [f"## {fw}", "", "| set " + head.split("\n")[0], "|---" + head.split("\n")[1],
                f"| all | {_stats(sel)} |"]
        for key in ("model", "context", "batch"):
            for v in sorted({r[key] for r in sel}, key=str):
                out.append(f"| {key} {v} | {_stats([r for r in sel if r[key] == v])} |")
        out += ["", "| model | context | " + " | ".join(
            f"b{b}" for b in sorted({r['batch'] for r in sel})) + " |",
                "|---|---|" + "---|" * len({r['batch'] for r in sel})]
        for m in MODELS:
            for c in sorted({r["context"] for r in sel}):
                cells = [f"{r['predicted_s'] * 1e3:.2f} / {r['measured_s'] * 1e3:.2f}"
                         for r in sorted(sel, key=lambda r: r["batch"])
                         if r["model"] == m and r["context"] == c]
                if cells:
                    out.append(f"| {m} | {c} | " + " | ".join(cells) + " |")
        out += ["", "(predicted / measured ms per step)", ""]
    return "\n".join(out) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--profile", required=True)
    ap.add_argument("--frameworks", default="eager,inductor")
    ap.add_argument("--contexts", default="128,512,1024")
    ap.add_argument("--batches", default="1,4,16,32")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--round-s", type=float, default=0.2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out-dir", default=str(ROOT / "benchmarks" / "results" / "local"))
    ap.add_argument("--repredict", default=None, metavar="CSV",
                    help="predict the points of a committed decode-<framework>.csv again (no "
                    "measuring); writes <CSV stem>-repredicted.csv and .md beside it")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    if args.repredict:
        src = Path(args.repredict)
        rows = repredict(src, args.profile)
        with open(src.with_name(src.stem + "-repredicted.csv"), "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
        text = summary(rows, args.profile, "python benchmarks/decode.py " + " ".join(sys.argv[1:]),
                       0.0, title=f"# Decode steps re-predicted: the measured points of {src.name}, "
                       "predicted with the code of this date (not a same-run validation)")
        src.with_name(src.stem + "-repredicted.md").write_text(text)
        print(text)
        return
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    contexts = [int(c) for c in args.contexts.split(",")]
    batches = [int(b) for b in args.batches.split(",")]
    started = time.perf_counter()
    rows: list[dict[str, Any]] = []
    for fw in args.frameworks.split(","):
        fw_rows = run(fw, args.profile, contexts, batches, args.rounds, args.round_s)
        with open(out / f"decode-{fw}.csv", "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(fw_rows[0]))
            w.writeheader()
            w.writerows(fw_rows)
        rows += fw_rows
    command = "python benchmarks/decode.py " + " ".join(sys.argv[1:])
    text = summary(rows, args.profile, command, time.perf_counter() - started)
    (out / "decode-summary.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
