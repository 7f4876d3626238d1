"""Model specs: zoo names, torchvision:, timm:, hf:, file and module factories, and their inputs."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest
import torch
from torch import nn

from ftmodel.errors import InvalidArgumentError, MissingExtraError, UnknownNameError
from ftmodel.tools.user_models import (
    ShapeInputs,
    TokenInputs,
    load_model,
    parse_input_shape,
    parse_options,
)
from ftmodel.tracing.inputs import InputSpec, resolve_inputs

TINY_BERT = "hf:BertConfig:num_hidden_layers=1,hidden_size=32,num_attention_heads=2," \
            "intermediate_size=64,vocab_size=100"


def shapes(model: nn.Module, inputs: InputSpec, batch: int = 2) -> list[tuple[int, ...]]:
    return [tuple(t.shape) for t in resolve_inputs(model, inputs, batch).tensors()]


# ---------------------------------------------------------------- parsing
@pytest.mark.parametrize("text, shape", [("3x224x224", (3, 224, 224)), ("3X64x64", (3, 64, 64)),
                                         (" 16000 ", (16000,)), ("3,32,32", (3, 32, 32)),
                                         ("3×8×8", (3, 8, 8))])
def test_input_shape_is_parsed(text: str, shape: tuple[int, ...]) -> None:
    assert parse_input_shape(text) == shape


@pytest.mark.parametrize("text", ["", "3x", "0x3", "-1", "axb", "3x224x224x"])
def test_bad_input_shape_names_the_value_and_the_form(text: str) -> None:
    with pytest.raises(InvalidArgumentError, match=r"--input-shape .* e\.g\. 3x224x224"):
        parse_input_shape(text)


def test_options_are_typed() -> None:
    assert parse_options("a=2,b=0.5,c=true,d=False,e=none,f=gelu,g='x y'") == {
        "a": 2, "b": 0.5, "c": True, "d": False, "e": None, "f": "gelu", "g": "x y"}
    assert parse_options("") == {}
    with pytest.raises(InvalidArgumentError, match="not a key=value option"):
        parse_options("num_hidden_layers", "hf:BertConfig:num_hidden_layers")


def test_python_arguments_are_checked() -> None:
    with pytest.raises(InvalidArgumentError, match="input_shape must be"):
        load_model("mlp-deep-narrow", input_shape=(0, 3))
    with pytest.raises(InvalidArgumentError, match="--seq-len must be an integer >= 1"):
        load_model("mlp-deep-narrow", seq_len=0)
    with pytest.raises(InvalidArgumentError, match="model spec must be"):
        load_model("  ")


# ---------------------------------------------------------------- zoo
def test_zoo_name_keeps_its_inputs_unless_overridden() -> None:
    model, inputs = load_model("mlp-deep-narrow")
    assert shapes(model, inputs) == [(2, 256)]
    with pytest.raises(UnknownNameError, match=r"resnet18@112.*torchvision:<arch>"):
        load_model("resnet181")


def test_zoo_text_model_takes_seq_len() -> None:
    model, inputs = load_model("bert-mini@64", seq_len=16)
    assert inputs == TokenInputs(16, 1000)
    assert shapes(model, inputs) == [(2, 16)]


# ---------------------------------------------------------------- torchvision
def test_torchvision_arch_at_a_small_input_shape() -> None:
    model, inputs = load_model("torchvision:resnet18", input_shape=(3, 32, 32))
    assert type(model).__name__ == "ResNet" and not model.training
    assert shapes(model, inputs) == [(2, 3, 32, 32)]


def test_torchvision_default_inputs_and_options() -> None:
    _, inputs = load_model("torchvision:squeezenet1_1:num_classes=10")
    assert inputs == ShapeInputs((3, 224, 224))


def test_torchvision_bad_specs() -> None:
    with pytest.raises(InvalidArgumentError, match="did you mean 'torchvision:resnet18'"):
        load_model("torchvision:resnet181")
    with pytest.raises(InvalidArgumentError, match="random weights"):
        load_model("torchvision:resnet18:weights=DEFAULT")
    with pytest.raises(InvalidArgumentError, match="keyword arguments torchvision.models.resnet18"):
        load_model("torchvision:resnet18:no_such_option=1")
    with pytest.raises(InvalidArgumentError, match="not both"):
        load_model("torchvision:resnet18", input_shape=(3, 8, 8), seq_len=4)


# ---------------------------------------------------------------- timm
def test_timm_model_uses_its_configured_input_size() -> None:
    pytest.importorskip("timm")
    model, inputs = load_model("timm:resnet10t")
    assert isinstance(inputs, ShapeInputs)
    assert inputs.shape == tuple(model.pretrained_cfg["input_size"])
    model, inputs = load_model("timm:resnet10t", input_shape=(3, 32, 32))
    assert shapes(model, inputs) == [(2, 3, 32, 32)]


def test_timm_unknown_name_names_the_closest() -> None:
    pytest.importorskip("timm")
    with pytest.raises(InvalidArgumentError, match="did you mean 'timm:resnet10t'"):
        load_model("timm:resnet10tt")


def test_missing_package_is_a_missing_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "timm", None)  # import timm now fails
    with pytest.raises(MissingExtraError, match=r"pip install 'ftmodel\[zoo\]'"):
        load_model("timm:resnet10t")
    monkeypatch.setitem(sys.modules, "torchvision", None)
    with pytest.raises(MissingExtraError, match=r"zoo model 'resnet18@112'.*ftmodel\[zoo\]"):
        load_model("resnet18@112")


# ---------------------------------------------------------------- hf
def test_hf_config_with_values_builds_the_base_model() -> None:
    pytest.importorskip("transformers")
    model, inputs = load_model(TINY_BERT, seq_len=16)
    assert type(model).__name__ == "BertModel" and not model.training
    assert model.config.num_hidden_layers == 1 and model.config.hidden_size == 32
    assert inputs == TokenInputs(16, 100)
    ids = resolve_inputs(model, inputs, 3).kwargs["input_ids"]
    assert ids.shape == (3, 16) and int(ids.max()) < 100


def test_hf_model_type_and_encoder_decoder_inputs() -> None:
    pytest.importorskip("transformers")
    model, inputs = load_model("hf:t5:num_layers=1,num_decoder_layers=1,d_model=16,d_ff=32,"
                               "num_heads=2,d_kv=8,vocab_size=50", seq_len=8)
    assert type(model).__name__ == "T5Model"
    assert set(resolve_inputs(model, inputs, 2).kwargs) == {"input_ids", "decoder_input_ids"}


def test_hf_vision_config_gets_pixel_values() -> None:
    pytest.importorskip("transformers")
    model, inputs = load_model("hf:ViTConfig:num_hidden_layers=1,hidden_size=16,"
                               "num_attention_heads=2,intermediate_size=32,image_size=32,"
                               "patch_size=8")
    assert inputs == ShapeInputs((3, 32, 32), "pixel_values")


def test_hf_bad_specs() -> None:
    pytest.importorskip("transformers")
    with pytest.raises(InvalidArgumentError, match="did you mean 'hf:BertConfig'"):
        load_model("hf:BertConfg")
    with pytest.raises(InvalidArgumentError, match="did you mean 'hf:BertConfig'"):
        load_model("hf:BertModel")  # a model class, not a configuration
    with pytest.raises(InvalidArgumentError, match="did you mean 'num_hidden_layers'"):
        load_model("hf:BertConfig:num_hidden_layer=1")
    with pytest.raises(InvalidArgumentError, match="not a multiple"):
        load_model("hf:BertConfig:num_hidden_layers=1,hidden_size=30")
    with pytest.raises(InvalidArgumentError, match="max_position_embeddings"):
        load_model(TINY_BERT + ",max_position_embeddings=8", seq_len=16)
    with pytest.raises(InvalidArgumentError, match="--seq-len"):
        load_model(TINY_BERT, input_shape=(16,))


# ---------------------------------------------------------------- factories
FACTORIES = textwrap.dedent("""
    import torch
    from torch import nn

    def build():
        return nn.Sequential(nn.Linear(8, 4))

    def with_inputs():
        return nn.Sequential(nn.Linear(6, 2)), torch.randn(1, 6)

    def language():
        return nn.Sequential(nn.Embedding(50, 8), nn.Linear(8, 2))

    def wrong():
        return 3

    NOT_CALLABLE = 1
""")


@pytest.fixture
def factory_file(tmp_path: Path) -> Path:
    path = tmp_path / "my_nets.py"
    path.write_text(FACTORIES)
    return path


def test_file_factory_returning_model_and_inputs(factory_file: Path) -> None:
    model, inputs = load_model(f"{factory_file}:with_inputs")
    assert isinstance(inputs, torch.Tensor) and not model.training
    assert shapes(model, inputs) == [(2, 6)]


def test_file_factory_returning_a_module_takes_the_options(factory_file: Path) -> None:
    model, inputs = load_model(f"{factory_file}:build", input_shape=(8,))
    assert shapes(model, inputs) == [(2, 8)]
    with pytest.raises(InvalidArgumentError, match="--input-shape"):
        load_model(f"{factory_file}:build")
    model, inputs = load_model(f"{factory_file}:language", seq_len=12)
    assert inputs == TokenInputs(12, 50, keys=())
    assert shapes(model, inputs) == [(2, 12)]
    with pytest.raises(InvalidArgumentError, match="nn.Embedding"):
        load_model(f"{factory_file}:build", seq_len=12)


def test_bad_file_specs(factory_file: Path, tmp_path: Path) -> None:
    with pytest.raises(InvalidArgumentError, match="did you mean 'build'"):
        load_model(f"{factory_file}:buidl")
    with pytest.raises(InvalidArgumentError, match="not a callable"):
        load_model(f"{factory_file}:NOT_CALLABLE")
    with pytest.raises(InvalidArgumentError, match=r"returned int; expected an nn.Module"):
        load_model(f"{factory_file}:wrong")
    with pytest.raises(InvalidArgumentError, match="no factory"):
        load_model(str(factory_file))
    with pytest.raises(InvalidArgumentError, match="no file"):
        load_model(f"{tmp_path / 'absent.py'}:build")


def test_module_factory_imports_from_the_current_directory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "ftmodel_spec_mod.py").write_text(FACTORIES)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delitem(sys.modules, "ftmodel_spec_mod", raising=False)
    try:
        model, inputs = load_model("ftmodel_spec_mod:build", input_shape=(8,))
        assert shapes(model, inputs) == [(2, 8)]
    finally:
        sys.modules.pop("ftmodel_spec_mod", None)
    model, inputs = load_model("torch.nn:Identity", input_shape=(5,))
    assert isinstance(model, nn.Identity)


def test_bad_module_specs() -> None:
    with pytest.raises(InvalidArgumentError, match="did you mean 'timm:resnet18'"):
        load_model("tim:resnet18")
    with pytest.raises(InvalidArgumentError, match="no Python module 'no_such_pkg.mod'"):
        load_model("no_such_pkg.mod:build")
    with pytest.raises(InvalidArgumentError, match="is not understood"):
        load_model("not a spec:x y")
    with pytest.raises(InvalidArgumentError, match="has no 'Nope'"):
        load_model("torch.nn:Nope")
