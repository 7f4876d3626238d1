"""Decode steps of causal LMs with a KV cache: inputs=ftmodel.inputs.decode(context=...)."""

from __future__ import annotations

import shutil

import pytest
import torch

import ftmodel
from ftmodel.cli import main
from ftmodel.errors import FrameworkUnsupported, InvalidArgumentError

transformers = pytest.importorskip("transformers")

VOCAB = 1000


def _llama(meta: bool = True) -> torch.nn.Module:
    cfg = transformers.LlamaConfig(hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                                   num_attention_heads=8, num_key_value_heads=2,
                                   vocab_size=VOCAB, max_position_embeddings=4096,
                                   bos_token_id=0, eos_token_id=0)
    if meta:
        with torch.device("meta"):
            return transformers.LlamaForCausalLM(cfg).eval()
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(cfg).eval()


def _gpt2() -> torch.nn.Module:
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(n_embd=128, n_layer=2, n_head=4, vocab_size=VOCAB,
                                  n_positions=512, bos_token_id=0, eos_token_id=0)
    return transformers.GPT2LMHeadModel(cfg).eval()


def _llama_step_macs(batch: int, context: int) -> int:
    """Analytic MACs of one token of the Llama above: projections (grouped-query K and V),
    the gated MLP, the LM head, and attention over context + 1 positions."""
    e, kv, f, layers, heads, hd = 256, 2 * 32, 512, 2, 8, 32
    per_token = layers * (e * e + 2 * e * kv + e * e + 3 * e * f) + e * VOCAB
    attention = layers * heads * (context + 1) * 2 * hd
    return batch * (per_token + attention)


@pytest.mark.parametrize("cache", ["dynamic", "static"])
def test_llama_built_on_meta_decode_step(cache: str) -> None:
    ps = ftmodel.predict_latency(_llama(), "cudagraphs", "h100", [1, 8, 64],
                                 inputs=ftmodel.inputs.decode(context=1024, cache=cache),
                                 dtype="fp16")
    for p in ps:
        assert p.macs == _llama_step_macs(p.batch, 1024)
        assert p.decode_context == 1024
        assert p.tokens_per_s == pytest.approx(p.batch / p.latency_s)
        assert p.as_dict()["tokens_per_s"] == p.tokens_per_s
    assert ps[2].tokens_per_s > ps[0].tokens_per_s  # batching sequences raises throughput


def test_longer_context_costs_more_attention() -> None:
    short, long = (ftmodel.predict_latency(_llama(), "eager", "a100", 8,
                                           inputs=ftmodel.inputs.decode(context=c))
                   for c in (128, 4096))
    assert long.macs - short.macs == _llama_step_macs(8, 4096) - _llama_step_macs(8, 128)
    assert long.compute_s > short.compute_s


def test_an_ordinary_forward_has_no_token_rate() -> None:
    p = ftmodel.predict_latency(_gpt2(), "eager", "a100", 2,
                                inputs=lambda b: {"input_ids": torch.zeros(b, 16, dtype=torch.long)})
    assert p.decode_context is None and p.tokens_per_s is None


def test_gpt2_decode_under_eager_and_cuda_graphs() -> None:
    model = _gpt2()
    eager, graph = (ftmodel.predict_latency(model, fw, "a100", 4,
                                            inputs=ftmodel.inputs.decode(context=256))
                    for fw in ("eager", "cudagraphs"))
    assert eager.macs == graph.macs > 0
    assert graph.latency_s < eager.latency_s  # the framework tax CUDA graphs remove


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("g++") is None and shutil.which("c++") is None,
                    reason="inductor's CPU target needs a C++ compiler")
def test_gpt2_decode_under_inductor() -> None:
    model = _gpt2()
    spec = ftmodel.inputs.decode(context=64)
    eager = ftmodel.predict_latency(model, "eager", "a100", 2, inputs=spec)
    compiled = ftmodel.predict_latency(model, "inductor", "a100", 2, inputs=spec)
    assert compiled.macs == pytest.approx(eager.macs, rel=0.03)
    assert compiled.n_launches < eager.n_launches


def test_exporting_frameworks_refuse_by_name() -> None:
    with pytest.raises(FrameworkUnsupported, match="decode step"):
        ftmodel.predict_latency(_gpt2(), "torchscript", "a100", 1,
                                inputs=ftmodel.inputs.decode(context=32))


def test_bad_decode_arguments_are_named() -> None:
    with pytest.raises(InvalidArgumentError, match="context must be an integer >= 1"):
        ftmodel.inputs.decode(context=0)
    with pytest.raises(InvalidArgumentError, match="cache must be one of"):
        ftmodel.inputs.decode(context=8, cache="paged")
    mlp = torch.nn.Sequential(torch.nn.Linear(8, 8))
    with pytest.raises(InvalidArgumentError, match="Hugging Face causal LM"):
        ftmodel.predict_latency(mlp, "eager", "a100", 1, inputs=ftmodel.inputs.decode(8))


def test_cli_predicts_a_decode_step(capsys: pytest.CaptureFixture[str],
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    assert main(["predict", "gpt2-small4@64", "--device", "a100", "--batch", "1,8",
                 "--decode-context", "100"]) == 0
    out = capsys.readouterr().out
    assert "decode step at context 100" in out and "tokens/s" in out
