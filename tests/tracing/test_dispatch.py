"""Fake-tensor tracing: no compute, no memory, no side effects; the real fallback; inputs.

No test here asserts a wall-clock time (project rule): memory is checked, speed is a benchmark.
"""

from __future__ import annotations

import resource
import sys
from typing import Any
import weakref

import pytest
import torch
import torchvision
from torch import nn

from ftmodel.errors import InvalidArgumentError, TraceError
from ftmodel.tracing.dispatch import trace

GIB = 1024**3


def _maxrss_bytes() -> int:
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss if sys.platform == "darwin" else rss * 1024  # Linux reports KiB


def _no_global_hooks() -> bool:
    mod = nn.modules.module
    return not mod._global_forward_hooks and not mod._global_forward_pre_hooks


# ---- a LLaMA-7B-sized model on the meta device ------------------------------------------------

def test_llama_7b_on_meta_device_traces_fake_with_analytic_macs() -> None:
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                      num_attention_heads=32, vocab_size=32000)
    rss_before = _maxrss_bytes()
    with torch.device("meta"):
        model = LlamaForCausalLM(cfg)
    tr = trace(model, torch.zeros(1, 128, dtype=torch.long))  # ordinary CPU token ids (B, S)
    growth = _maxrss_bytes() - rss_before

    n_params = sum(p.numel() for p in model.parameters())
    assert n_params == pytest.approx(6.74e9, rel=0.01)  # really 7B-sized
    assert tr.fake and tr.warnings == ()
    assert all(p.device.type == "meta" for p in model.parameters())

    b, s, L = 1, 128, cfg.num_hidden_layers
    h, i, v = cfg.hidden_size, cfg.intermediate_size, cfg.vocab_size
    n_heads = cfg.num_attention_heads
    d = h // n_heads  # head dim, 128
    kv = cfg.num_key_value_heads * d  # k/v projection width (= h without GQA)
    # Weight-matrix MACs per token = non-embedding weight params: per layer q, o (h*h), k, v
    # (h*kv), gate/up/down (3*h*i), plus the lm_head (h*V); norms and biases are not matmuls.
    per_token = L * (2 * h * h + 2 * h * kv + 3 * h * i) + h * v  # 6,607,077,376
    weights_2d = sum(p.numel() for n, p in model.named_parameters()
                     if p.dim() == 2 and "embed_tokens" not in n)
    assert per_token == weights_2d
    # Attention: Q.K^T and P.V per layer, B*H*S*S*(Dq + Dv) (causal mask not discounted).
    attention = L * b * n_heads * s * s * (d + d)  # 4,294,967,296
    assert tr.total_macs == pytest.approx(b * s * per_token + attention, rel=1e-3)
    # ru_maxrss is a high-water mark, so the growth bounds the trace's peak only above earlier
    # peaks of this process; materialising the weights (13 GB in fp16, 27 GB in fp32) would
    # exceed any earlier peak of the test run by far.
    assert growth < 2 * GIB


def test_meta_and_real_models_trace_identically() -> None:
    torch.manual_seed(0)
    real = torchvision.models.resnet18(weights=None)
    with torch.device("meta"):
        meta = torchvision.models.resnet18(weights=None)
    x = torch.randn(1, 3, 64, 64)
    a, b = trace(real, x), trace(meta, x)
    assert a.fake and b.fake
    assert [(r.op, r.module_path, r.macs, r.launches) for r in a.records] == \
           [(r.op, r.module_path, r.macs, r.launches) for r in b.records]


# ---- no side effects on a model with real weights --------------------------------------------

class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3)
        self.bn = nn.BatchNorm2d(8)  # running stats would move if it ran in training mode
        self.drop = nn.Dropout(0.5)
        self.head = nn.Sequential(nn.Flatten(), nn.Linear(8 * 6 * 6, 10))

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: (B, 3, 8, 8)
        return self.head(self.drop(torch.relu(self.bn(self.conv(x)))))  # (B, 10)


def _checksum(model: nn.Module) -> float:
    return float(sum(t.double().sum() for t in model.state_dict().values()))


class _Caching(nn.Module):
    """Caches what its forward computes on itself, as timm's LeViT caches its attention biases
    (a dict attribute) and rotary embeddings their tables (a tensor attribute)."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 8)
        self.cache: dict[str, torch.Tensor] = {}
        self.calls: list[int] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if "w2" not in self.cache:
            self.cache["w2"] = self.lin.weight * 2
        self.table = self.cache["w2"] + 1
        self.calls.append(1)
        return x @ self.cache["w2"] + self.table.sum()


def test_trace_puts_back_what_a_forward_caches_on_its_modules() -> None:
    """A cache made during a trace would hold a FakeTensor, and the model's next real call
    would compute on fake tensors; an LSTM's flat weight list likewise held the fakes that
    functional_call swapped in."""
    from torch._subclasses.fake_tensor import FakeTensor

    cached, rnn = _Caching(), nn.LSTM(8, 8, batch_first=True)
    trace(cached, torch.randn(2, 8), batch=4)
    trace(rnn, torch.randn(2, 5, 8), batch=4)
    assert cached.cache == {} and cached.calls == [] and not hasattr(cached, "table")
    assert not any(isinstance(w, FakeTensor) for w in rnn._flat_weights)
    y, _ = rnn(torch.randn(2, 5, 8))
    assert type(cached(torch.randn(2, 8))) is torch.Tensor and type(y) is torch.Tensor
    # a cache the model made before the trace is kept, the same object with the same contents
    kept = cached.cache["w2"]
    trace(cached, torch.randn(2, 8), batch=4)
    assert cached.cache["w2"] is kept and len(cached.calls) == 1 and cached.table is not None


def test_fake_trace_leaves_real_model_untouched() -> None:
    torch.manual_seed(0)
    model = Net().train()
    model.head.eval()  # mixed modes must survive too
    with torch.no_grad():
        model.bn.running_mean.uniform_(-1, 1)
    before = {k: t.clone() for k, t in model.state_dict().items()}
    checksum = _checksum(model)
    params = list(model.parameters())
    modes = [m.training for m in model.modules()]
    grad_enabled = torch.is_grad_enabled()

    tr = trace(model, torch.randn(2, 3, 8, 8), batch=4)

    assert tr.fake and tr.batch == 4
    assert _checksum(model) == checksum
    after = model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)  # num_batches_tracked too
    assert all(p is q and p.requires_grad for p, q in zip(params, model.parameters()))
    assert all(p.device.type == "cpu" and not p.is_meta for p in model.parameters())
    assert [m.training for m in model.modules()] == modes
    assert torch.is_grad_enabled() == grad_enabled
    assert _no_global_hooks()
    # traced in eval mode: no dropout mask, BN uses its running stats
    assert not any("dropout" in op or "bernoulli" in op for op in tr.by_operator())


# ---- fallback to a real trace ---------------------------------------------------------------

class DataDependentIf(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.fc(x)  # addmm
        if y.sum() > 0:  # sum + gt + _local_scalar_dense (0 launches)
            return torch.relu(y)  # relu
        return -y  # or neg


class CallsItem(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x) * x.abs().max().item()  # addmm, abs, max, mul


class CallsTolist(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n = int(x[0, 0].abs().ceil().tolist()) % 2 + 1  # abs, ceil; tolist reads host memory
        return self.fc(x)[:, :n]  # addmm


@pytest.mark.parametrize("cls,launches", [
    (DataDependentIf, 4),  # addmm + sum + gt + (relu | neg) = 4
    (CallsItem, 4),  # addmm + abs + max + mul = 4
    (CallsTolist, 3),  # abs + ceil + addmm = 3
])
def test_data_dependent_model_falls_back_to_real_trace(cls: type[nn.Module],
                                                       launches: int) -> None:
    torch.manual_seed(0)
    model = cls()
    tr = trace(model, torch.randn(2, 8))
    assert tr.fake is False
    assert len(tr.warnings) == 1 and "fake tensors" in tr.warnings[0]
    assert tr.batch == 2 and tr.n_launches == launches
    assert _no_global_hooks()


@pytest.mark.parametrize("cls", [DataDependentIf, CallsItem, CallsTolist])
def test_data_dependent_model_on_meta_device_raises(cls: type[nn.Module]) -> None:
    with torch.device("meta"):
        model = cls()
    with pytest.raises(TraceError, match="meta"):
        trace(model, torch.randn(2, 8))
    assert _no_global_hooks()


class TiedLinears(nn.Module):
    """Two layers sharing one weight, as GPT-2's lm_head shares the token embedding."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(8, 8)
        self.b = nn.Linear(8, 8)
        self.b.weight = self.a.weight

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(self.a(x))


def test_tied_weights_trace_fake() -> None:
    tr = trace(TiedLinears(), torch.randn(2, 8))
    assert tr.fake and tr.warnings == ()


def test_tied_weights_on_meta_device_trace() -> None:
    with torch.device("meta"):
        model = TiedLinears()
    tr = trace(model, torch.randn(2, 8))
    assert tr.fake


class PlainTensorAttribute(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.scale = torch.tensor(2.0)  # a plain attribute, not a registered buffer

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x) * self.scale


def test_plain_tensor_attribute_traces_fake() -> None:
    tr = trace(PlainTensorAttribute(), torch.randn(2, 8))
    assert tr.fake


# ---- inputs and batch -----------------------------------------------------------------------

@pytest.fixture(scope="module")
def meta_resnet18() -> nn.Module:
    with torch.device("meta"):
        return torchvision.models.resnet18(weights=None)


def test_torchvision_default_inputs(meta_resnet18: nn.Module) -> None:
    tr = trace(meta_resnet18, inputs=None, batch=2)
    assert tr.fake and tr.batch == 2
    assert tr.records[0].input_shapes[0] == (2, 3, 224, 224)  # (B, 3, 224, 224)
    assert trace(meta_resnet18).records[0].input_shapes[0] == (1, 3, 224, 224)


def test_hugging_face_default_inputs() -> None:
    from transformers import BertConfig, BertModel

    with torch.device("meta"):
        model = BertModel(BertConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                     intermediate_size=64))
    tr = trace(model, batch=3)
    assert tr.fake and tr.batch == 3
    lookup = next(r for r in tr.records if r.module_path == "embeddings.word_embeddings")
    assert lookup.op == "aten.embedding.default"
    assert lookup.input_shapes[1] == (3, 128)  # input_ids (B, S=128)


@pytest.mark.parametrize("inputs,batch,expected", [
    (torch.randn(2, 8), None, 2),  # a tensor keeps its own batch
    (torch.randn(2, 8), 5, 5),  # ... or is resized along dim 0
    ((torch.randn(1, 8),), 3, 3),  # a tuple of positional arguments
    ({"input": torch.randn(1, 8)}, 4, 4),  # a dict of keyword arguments
    (lambda b: torch.randn(b, 8), 6, 6),  # a callable batch -> inputs
])
def test_input_kinds_and_batch_resizing(inputs: Any, batch: int | None, expected: int) -> None:
    tr = trace(nn.Linear(8, 4), inputs, batch=batch)
    assert tr.fake and tr.batch == expected
    addmm = next(r for r in tr.records if r.op == "aten.addmm.default")
    assert addmm.macs == expected * 8 * 4  # B*K*N


def test_plain_module_without_inputs_asks_for_them() -> None:
    with pytest.raises(InvalidArgumentError, match="inputs="):
        trace(nn.Linear(8, 4), inputs=None)
    assert _no_global_hooks()


@pytest.mark.parametrize("batch", [0, -1])
def test_invalid_batch_raises_invalid_argument(batch: int) -> None:
    with pytest.raises(InvalidArgumentError, match=f"got {batch}"):
        trace(nn.Linear(8, 4), torch.randn(1, 8), batch=batch)


def _double(x: torch.Tensor) -> torch.Tensor:
    return _plus_one(x) * 2  # one more model-code call


def _plus_one(x: torch.Tensor) -> torch.Tensor:
    return x + 1


class _Glue(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.fc(x)  # a module call: counted as module_call, not as py_call
        return _double(_double(x))  # 2 calls of _double + 2 of _plus_one


def test_python_calls_of_the_model_are_counted() -> None:
    tr = trace(_Glue(), torch.randn(2, 4))
    assert tr.n_py_calls == 2 + 2
    assert tr.n_module_calls == 2  # _Glue and fc
    # built-in modules run no model code of their own: nothing to count
    plain = trace(nn.Sequential(nn.Linear(4, 4), nn.ReLU()), torch.randn(2, 4))
    assert plain.n_py_calls == 0
    from ftmodel.frameworks.eager import lower
    assert lower(tr).host_events["py_call"] == 4


class _Mortal:
    """An object with a weak-dictionary entry, whose callback runs when it dies."""


_REGISTRY: weakref.WeakValueDictionary[str, _Mortal] = weakref.WeakValueDictionary()
_DOOMED: list[_Mortal] = []


class _DropsTheLastReference(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _DOOMED.clear()  # a C call; the object's weak-dictionary callback runs in this frame
        return x.relu()


def test_callbacks_of_dying_objects_are_not_the_models_calls() -> None:
    """A weak container's callback runs inside whatever frame drops an object's last reference
    (in a trace, the fake tensors' memo entries); it is not a call the model makes, and counting
    it made a network's calls depend on what its process had traced before."""
    _DOOMED.append(_Mortal())
    _REGISTRY["doomed"] = _DOOMED[0]
    tr = trace(_DropsTheLastReference(), torch.randn(2, 4))
    assert "doomed" not in _REGISTRY  # the callback ran, during the forward
    assert tr.n_py_calls == 0


def test_model_code_in_a_folder_named_like_the_package_is_the_models(tmp_path: Any) -> None:
    """Framework code is torch's package and ftmodel's own, by their directories: a model
    file in a checkout named ``ftmodel`` (or ``torch``) is still the model's code."""
    import importlib.util

    for name in ("ftmodel", "torch"):
        folder = tmp_path / name / "examples"
        folder.mkdir(parents=True)
        path = folder / f"glue_{name}.py"
        path.write_text("import torch\n\n"
                        "def plus_one(x):\n    return x + 1\n\n"
                        "class Glue(torch.nn.Module):\n"
                        "    def forward(self, x):\n        return plus_one(plus_one(x))\n")
        spec = importlib.util.spec_from_file_location(f"glue_{name}", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        assert trace(module.Glue(), torch.randn(2, 4)).n_py_calls == 2, name


def test_calls_inside_an_aten_op_are_not_the_models(monkeypatch: pytest.MonkeyPatch) -> None:
    """Code run inside the dispatch of an aten op on fake tensors is torch's (meta kernels,
    decompositions, and whatever they call lazily the first time, e.g. typing_extensions), never
    the model's: a call made there is not counted even when its caller lives outside torch."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    seen: list[int] = []
    original = FakeTensorMode.__torch_dispatch__

    def note() -> None:
        seen.append(len(seen))

    def lazy_library_call(self: Any, *args: Any, **kwargs: Any) -> Any:
        note()  # a call between two frames outside torch (counted before the fix)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(FakeTensorMode, "__torch_dispatch__", lazy_library_call)
    tr = trace(_Glue(), torch.randn(2, 4))
    assert seen  # it ran, inside every op
    assert tr.n_py_calls == 2 + 2  # the model's own calls only


def test_trace_gives_a_running_cprofile_back() -> None:
    """The tracer's Python-call counter replaces the profile function while it runs; a cProfile
    running around the trace must be profiling again afterwards (it used to be replaced by a
    non-callable and stop)."""
    import cProfile
    import pstats

    def after_trace() -> int:
        return 1

    prof = cProfile.Profile()
    prof.enable()
    try:
        trace(nn.Sequential(nn.Linear(4, 4), nn.ReLU()), torch.randn(1, 4))
        after_trace()
    finally:
        prof.disable()
    profiled = {name for (_, _, name) in pstats.Stats(prof).stats}
    assert "after_trace" in profiled


def test_max_pool1d_is_eagers_own_kernel_not_its_fake_tensor_path() -> None:
    # on a tensor subclass (the tracer's fake tensors) F.max_pool1d takes its with-indices
    # path; eager on plain CPU tensors runs max_pool1d's own kernel, which writes no indices
    x = torch.randn(2, 8, 100)
    pool1d = [r for r in trace(nn.MaxPool1d(4), x).records if not r.is_view]
    assert [r.op for r in pool1d] == ["aten.max_pool1d.default"]
    assert pool1d[0].op_class == "pool"
    assert pool1d[0].bytes_read == x.numel() * 4
    assert pool1d[0].bytes_written == 2 * 8 * 25 * 4  # the values only
    with torch.no_grad(), torch.profiler.profile() as prof:
        nn.MaxPool1d(4)(x)
    assert "aten::max_pool1d" in {e.key for e in prof.key_averages()}
    # a 2-d pool keeps its indices, as eager writes them
    pool2d = [r for r in trace(nn.MaxPool2d(2), torch.randn(2, 8, 10, 10)).records
              if not r.is_view]
    assert [r.op for r in pool2d] == ["aten.max_pool2d_with_indices.default"]
    assert pool2d[0].bytes_written == 2 * 8 * 5 * 5 * (4 + 8)
