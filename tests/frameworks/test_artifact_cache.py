"""ftmodel.frameworks.artifact_cache.ArtifactCache and structure_key: built artifacts reused per model,
and per architecture where only the Program is wanted."""

from __future__ import annotations

import torch
from torch import nn

from ftmodel.frameworks.artifact_cache import ArtifactCache, structure_key


def _mlp(width: int = 32, seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(16, width), nn.ReLU(), nn.Linear(width, 4)).eval()


def test_two_instances_of_one_architecture_share_a_key() -> None:
    assert structure_key(_mlp(seed=0)) == structure_key(_mlp(seed=1))  # weights differ
    assert structure_key(_mlp(32)) != structure_key(_mlp(64))  # shapes differ
    other = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 4)).eval()
    assert structure_key(_mlp()) != structure_key(other)  # a module differs
    assert structure_key(_mlp()) != structure_key(_mlp().train())  # mode differs


def test_small_buffers_enter_by_value() -> None:
    a, b = _mlp(), _mlp()
    a.register_buffer("mask", torch.tril(torch.ones(4, 4)))
    b.register_buffer("mask", torch.ones(4, 4))
    assert structure_key(a) != structure_key(b)


def test_hugging_face_config_enters_the_key() -> None:
    import pytest
    transformers = pytest.importorskip("transformers")
    cfg = dict(vocab_size=100, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
               intermediate_size=64)
    m1 = transformers.BertModel(transformers.BertConfig(**cfg)).eval()
    m2 = transformers.BertModel(transformers.BertConfig(**cfg)).eval()
    m3 = transformers.BertModel(transformers.BertConfig(**cfg, hidden_act="relu")).eval()
    assert structure_key(m1) == structure_key(m2)
    assert structure_key(m1) != structure_key(m3)


def test_a_program_is_shared_by_structure_and_a_runnable_artifact_is_not() -> None:
    cache: ArtifactCache[str] = ArtifactCache(maxsize=4)
    built: list[int] = []

    def build(tag: str) -> str:
        built.append(1)
        return tag

    first, second = _mlp(seed=0), _mlp(seed=1)
    assert cache.get_or_build(first, (1, "fp32"), lambda: build("a"), by_structure=True) == "a"
    # a second instance: served from the first's build for a Program ...
    assert cache.get_or_build(second, (1, "fp32"), lambda: build("b"), by_structure=True) == "a"
    assert len(built) == 1
    # ... but built for itself when the artifact will run its own weights
    assert cache.get_or_build(second, (1, "fp32"), lambda: build("c")) == "c"
    assert len(built) == 2
    # another batch is another key
    assert cache.get_or_build(second, (8, "fp32"), lambda: build("d"), by_structure=True) == "d"
    assert len(built) == 3


class _Fn(nn.Module):
    def __init__(self, fn: object) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fn(x)  # type: ignore[operator, no-any-return]


def test_what_a_forward_calls_enters_the_key() -> None:
    # modules alike but for the function their forward calls (calibration's op samples)
    assert structure_key(_Fn(torch.relu)) != structure_key(_Fn(torch.tanh))
    assert structure_key(_Fn(lambda t: t * 0.5)) != structure_key(_Fn(lambda t: t * 2.0))
    scale = 0.5
    assert structure_key(_Fn(lambda t: t * scale)) == structure_key(_Fn(lambda t: t * scale))

    class Opaque:
        pass
    # an attribute of unknown kind: the module shares nothing
    assert structure_key(_Fn(Opaque())) != structure_key(_Fn(Opaque()))


def test_a_fake_tensor_left_in_a_cache_attribute_is_keyed_by_shape() -> None:
    # LeViT keeps attention biases per device in a dict; a fake-tensor trace fills it
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode():
        fake = torch.zeros(4, 49, 49)
    m = _Fn(torch.relu)
    m.cache = {"cpu": fake}  # type: ignore[assignment]
    assert len(structure_key(m)) == 64
