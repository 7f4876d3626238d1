"""The validation corpus: models ftmodel was not developed against, split once into two halves.

The zoo (:mod:`ftmodel.tools.zoo`) is what the latency model and its calibration were developed and
checked against, so its accuracy is a tuning figure. This corpus holds other models — 49 of them
from 18 families (torchvision and timm CNNs, vision transformers and hybrids, MLP-Mixers, Hugging
Face encoders and decoders, recurrent nets, 1-D convolutional audio nets, plain MLPs) — all with
random weights and reduced input sizes so that this CPU measures each in seconds.

**The split.** :func:`is_held_out` puts a model in the *held-out* half when the SHA-256 of its
name is odd. The rule depends on the name alone and was fixed before any change to the latency
model was judged on the corpus: the held-out half is measured and reported, never used to choose
a constant or a mechanism; the *tuning* half may be studied (per-operator diagnosis, plots).

Names say the input size (``resnet34@96``: 96×96 images; ``bert-6x384@64``: 64 tokens).
Libraries are imported when a model is built: torchvision and timm for images, transformers for
the encoders and decoders.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from ftmodel.tools.zoo import ZooModel, image_inputs, lookup, mlp, token_inputs, torchvision_model

__all__ = ["CORPUS", "FAMILIES", "get_corpus_model", "held_out", "is_held_out", "tuning"]


def is_held_out(name: str) -> bool:
    """The split rule: held out iff the SHA-256 of the model's name is odd."""
    return int(hashlib.sha256(name.encode()).hexdigest(), 16) % 2 == 1


# ---------------------------------------------------------------- builders
def _timm(arch: str, **kw: Any) -> Callable[[], nn.Module]:
    def build() -> nn.Module:
        import timm
        model: nn.Module = timm.create_model(arch, pretrained=False, **kw)
        return model.eval()
    return build


def _hf(model_cls: str, config_cls: str, **cfg: Any) -> Callable[[], nn.Module]:
    def build() -> nn.Module:
        import transformers
        config = getattr(transformers, config_cls)(**cfg)
        model: nn.Module = getattr(transformers, model_cls)(config)
        return model.eval()
    return build


def _token_tensor(seq: int, vocab: int) -> Callable[[int], torch.Tensor]:
    def make(b: int) -> torch.Tensor:
        g = torch.Generator().manual_seed(0)
        return torch.randint(0, vocab, (b, seq), generator=g)  # (B, S)
    return make


def _audio(samples: int, key: str | None = None) -> Callable[[int], Any]:
    def make(b: int) -> Any:
        x = torch.randn(b, samples)  # (B, T) raw waveform
        return {key: x} if key else x.unsqueeze(1)  # (B, 1, T) for conv nets
    return make


class LSTMLanguageModel(nn.Module):
    """Embedding → multi-layer LSTM → vocabulary projection of every step (an AWD-LSTM-style LM)."""

    def __init__(self, vocab: int = 2000, embed: int = 256, hidden: int = 512,
                 layers: int = 2) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, embed)
        self.rnn = nn.LSTM(embed, hidden, layers, batch_first=True)
        self.head = nn.Linear(hidden, vocab)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        out, _ = self.rnn(self.embed(ids))  # (B, S, H)
        logits: torch.Tensor = self.head(out)  # (B, S, V)
        return logits


class GRUClassifier(nn.Module):
    """Embedding → bidirectional GRU → classifier on the last step of both directions."""

    def __init__(self, vocab: int = 5000, embed: int = 128, hidden: int = 256,
                 layers: int = 2, classes: int = 4) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, embed)
        self.rnn = nn.GRU(embed, hidden, layers, batch_first=True, bidirectional=True)
        self.head = nn.Linear(2 * hidden, classes)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        out, _ = self.rnn(self.embed(ids))  # (B, S, 2H)
        logits: torch.Tensor = self.head(out[:, -1])  # (B, C)
        return logits


class SpeechLSTM(nn.Module):
    """Filter-bank frames → 3-layer LSTM → per-frame output (an acoustic model)."""

    def __init__(self, features: int = 40, hidden: int = 320, layers: int = 3,
                 outputs: int = 32) -> None:
        super().__init__()
        self.rnn = nn.LSTM(features, hidden, layers, batch_first=True)
        self.head = nn.Linear(hidden, outputs)

    def forward(self, frames: torch.Tensor) -> torch.Tensor:
        out, _ = self.rnn(frames)  # (B, T, H)
        logits: torch.Tensor = self.head(out)  # (B, T, O)
        return logits


class M5(nn.Module):
    """M5 (Dai et al., 2017): raw-waveform 1-D CNN, four conv/BN/ReLU/pool stages."""

    def __init__(self, channels: int = 64, classes: int = 35) -> None:
        super().__init__()
        c = channels
        layers: list[nn.Module] = []
        specs = [(1, c, 80, 4), (c, c, 3, 1), (c, 2 * c, 3, 1), (2 * c, 2 * c, 3, 1)]
        for cin, cout, k, s in specs:
            layers += [nn.Conv1d(cin, cout, k, stride=s), nn.BatchNorm1d(cout), nn.ReLU(),
                       nn.MaxPool1d(4)]
        self.features = nn.Sequential(*layers)
        self.head = nn.Linear(2 * c, classes)

    def forward(self, wave: torch.Tensor) -> torch.Tensor:
        h = self.features(wave)  # (B, 2c, T')
        logits: torch.Tensor = self.head(h.mean(dim=-1))  # (B, classes)
        return logits


class TCN(nn.Module):
    """Temporal convolutional network: residual blocks of dilated causal 1-D convolutions."""

    def __init__(self, channels: int = 128, levels: int = 6, kernel: int = 3,
                 classes: int = 10) -> None:
        super().__init__()
        self.inp = nn.Conv1d(1, channels, 1)
        self.blocks = nn.ModuleList()
        self.pads: list[int] = []
        for i in range(levels):
            d = 2 ** i
            self.pads.append((kernel - 1) * d)
            self.blocks.append(nn.Sequential(
                nn.Conv1d(channels, channels, kernel, dilation=d), nn.ReLU(),
                nn.Conv1d(channels, channels, 1), nn.ReLU()))
        self.head = nn.Linear(channels, classes)

    def forward(self, wave: torch.Tensor) -> torch.Tensor:
        h = self.inp(wave)  # (B, C, T)
        for pad, block in zip(self.pads, self.blocks):
            h = h + block(nn.functional.pad(h, (pad, 0)))  # causal: pad on the left
        logits: torch.Tensor = self.head(h[:, :, -1])  # (B, classes)
        return logits


def _features(frames: int, n: int) -> Callable[[int], torch.Tensor]:
    return lambda b: torch.randn(b, frames, n)  # (B, T, F)


def _vector(n: int) -> Callable[[int], torch.Tensor]:
    return lambda b: torch.randn(b, n)  # (B, F)


# ---------------------------------------------------------------- the corpus
_VOCAB = 8000
CORPUS: dict[str, ZooModel] = {m.name: m for m in [
    # torchvision / timm CNNs
    ZooModel("resnet34@96", "resnet", torchvision_model("resnet34"), image_inputs(96)),
    ZooModel("resnext50_32x4d@96", "resnet", torchvision_model("resnext50_32x4d"),
             image_inputs(96)),
    ZooModel("wide_resnet50_2@64", "resnet", torchvision_model("wide_resnet50_2"),
             image_inputs(64)),
    ZooModel("regnet_x_400mf@112", "regnet", torchvision_model("regnet_x_400mf"),
             image_inputs(112)),
    ZooModel("regnet_y_800mf@96", "regnet", torchvision_model("regnet_y_800mf"), image_inputs(96)),
    ZooModel("regnet_x_1_6gf@96", "regnet", torchvision_model("regnet_x_1_6gf"), image_inputs(96)),
    ZooModel("densenet169@64", "densenet", torchvision_model("densenet169"), image_inputs(64)),
    ZooModel("densenet201@64", "densenet", torchvision_model("densenet201"), image_inputs(64)),
    ZooModel("shufflenet_v2_x0_5@112", "shufflenet", torchvision_model("shufflenet_v2_x0_5"),
             image_inputs(112)),
    ZooModel("shufflenet_v2_x1_0@112", "shufflenet", torchvision_model("shufflenet_v2_x1_0"),
             image_inputs(112)),
    ZooModel("shufflenet_v2_x1_5@96", "shufflenet", torchvision_model("shufflenet_v2_x1_5"),
             image_inputs(96)),
    ZooModel("efficientnet_b1@112", "efficientnet", torchvision_model("efficientnet_b1"),
             image_inputs(112)),
    ZooModel("efficientnet_v2_s@96", "efficientnet", torchvision_model("efficientnet_v2_s"),
             image_inputs(96)),
    ZooModel("efficientnet_lite0@112", "efficientnet", _timm("efficientnet_lite0"),
             image_inputs(112)),
    ZooModel("ghostnet_100@112", "ghostnet", _timm("ghostnet_100"), image_inputs(112)),
    ZooModel("ghostnetv2_100@112", "ghostnet", _timm("ghostnetv2_100"), image_inputs(112)),
    ZooModel("convnext_tiny@64", "convnext", torchvision_model("convnext_tiny"), image_inputs(64)),
    ZooModel("convnext_atto@112", "convnext", _timm("convnext_atto"), image_inputs(112)),
    ZooModel("mobilenet_v3_large@112", "mobilenet", torchvision_model("mobilenet_v3_large"),
             image_inputs(112)),
    ZooModel("mnasnet1_0@112", "mobilenet", torchvision_model("mnasnet1_0"), image_inputs(112)),
    ZooModel("mobilenetv3_large_075@112", "mobilenet", _timm("mobilenetv3_large_075"),
             image_inputs(112)),
    ZooModel("googlenet@112", "inception", torchvision_model("googlenet", aux_logits=False,
                                               init_weights=False), image_inputs(112)),
    # vision transformers, hybrids, MLP-Mixers
    ZooModel("vit_b_32@96", "vit", torchvision_model("vit_b_32", image_size=96), image_inputs(96)),
    ZooModel("deit_tiny@112", "vit", _timm("deit_tiny_patch16_224", img_size=112),
             image_inputs(112)),
    ZooModel("vit_small@96", "vit", _timm("vit_small_patch16_224", img_size=96), image_inputs(96)),
    ZooModel("swin_t@112", "swin", torchvision_model("swin_t"), image_inputs(112)),
    ZooModel("swin_v2_t@64", "swin", torchvision_model("swin_v2_t"), image_inputs(64)),
    ZooModel("levit_128s@112", "hybrid-vit", _timm("levit_128s", img_size=112), image_inputs(112)),
    ZooModel("mobilevit_xxs@128", "hybrid-vit", _timm("mobilevit_xxs"), image_inputs(128)),
    ZooModel("efficientvit_b0@128", "hybrid-vit", _timm("efficientvit_b0"), image_inputs(128)),
    ZooModel("fastvit_t8@128", "hybrid-vit", _timm("fastvit_t8"), image_inputs(128)),
    ZooModel("mixer_s16@112", "mlp-mixer", _timm("mixer_s16_224", img_size=112), image_inputs(112)),
    ZooModel("resmlp_12@112", "mlp-mixer", _timm("resmlp_12_224", img_size=112), image_inputs(112)),
    # Hugging Face encoders
    ZooModel("bert-6x384@64", "encoder",
             _hf("BertModel", "BertConfig", hidden_size=384, num_hidden_layers=6,
                 num_attention_heads=6, intermediate_size=1536, vocab_size=_VOCAB),
             token_inputs(64, _VOCAB)),
    ZooModel("electra-small@64", "encoder",
             _hf("ElectraModel", "ElectraConfig", embedding_size=128, hidden_size=256,
                 num_hidden_layers=6, num_attention_heads=4, intermediate_size=1024,
                 vocab_size=_VOCAB), token_inputs(64, _VOCAB)),
    ZooModel("distilbert-4x384@96", "encoder",
             _hf("DistilBertModel", "DistilBertConfig", dim=384, n_layers=4, n_heads=6,
                 hidden_dim=1536, vocab_size=_VOCAB), token_inputs(96, _VOCAB)),
    ZooModel("t5-encoder-4x256@64", "encoder",
             _hf("T5EncoderModel", "T5Config", d_model=256, d_ff=1024, d_kv=64, num_layers=4,
                 num_heads=4, vocab_size=_VOCAB), token_inputs(64, _VOCAB)),
    ZooModel("wav2vec2-4x256@8000", "encoder",
             _hf("Wav2Vec2Model", "Wav2Vec2Config", hidden_size=256, num_hidden_layers=4,
                 num_attention_heads=4, intermediate_size=1024, conv_dim=(128,) * 7,
                 num_conv_pos_embeddings=64, num_conv_pos_embedding_groups=8),
             _audio(8000, "input_values")),
    # Hugging Face decoders (full-sequence forward)
    ZooModel("gpt2-6x512@64", "decoder",
             _hf("GPT2Model", "GPT2Config", n_embd=512, n_layer=6, n_head=8,
                 vocab_size=_VOCAB, n_positions=256, bos_token_id=0, eos_token_id=0),
             token_inputs(64, _VOCAB)),
    ZooModel("llama-gqa-4x512@64", "decoder",
             _hf("LlamaModel", "LlamaConfig", hidden_size=512, intermediate_size=1376,
                 num_hidden_layers=4, num_attention_heads=8, num_key_value_heads=2,
                 vocab_size=_VOCAB, max_position_embeddings=256), token_inputs(64, _VOCAB)),
    ZooModel("qwen2-gqa-4x384@64", "decoder",
             _hf("Qwen2Model", "Qwen2Config", hidden_size=384, intermediate_size=1024,
                 num_hidden_layers=4, num_attention_heads=6, num_key_value_heads=2,
                 vocab_size=_VOCAB, max_position_embeddings=256), token_inputs(64, _VOCAB)),
    # recurrent nets
    ZooModel("lstm-lm-2x512@64", "recurrent", LSTMLanguageModel, _token_tensor(64, 2000)),
    ZooModel("gru-bi-2x256@64", "recurrent", GRUClassifier, _token_tensor(64, 5000)),
    ZooModel("speech-lstm-3x320@100", "recurrent", SpeechLSTM, _features(100, 40)),
    # 1-D convolutional audio
    ZooModel("m5@8000", "audio-conv", M5, _audio(8000)),
    ZooModel("tcn-6x128@1024", "audio-conv", TCN, _audio(1024)),
    # plain MLPs
    ZooModel("mlp-8x512", "mlp", lambda: mlp(8, 512, d_in=784), _vector(784)),
    ZooModel("mlp-4x2048", "mlp", lambda: mlp(4, 2048, d_in=512), _vector(512)),
    ZooModel("mlp-16x256", "mlp", lambda: mlp(16, 256, d_in=128), _vector(128)),
]}
FAMILIES: tuple[str, ...] = tuple(dict.fromkeys(m.family for m in CORPUS.values()))


def held_out(held: bool = True) -> tuple[str, ...]:
    """Names of the held-out half (``held=False``: the tuning half), in corpus order."""
    return tuple(n for n in CORPUS if is_held_out(n) == held)


def tuning() -> tuple[str, ...]:
    """Names of the tuning half, in corpus order."""
    return held_out(False)


def get_corpus_model(name: str) -> ZooModel:
    """The corpus entry called ``name`` (case-insensitive), or an error listing the names."""
    return lookup(CORPUS, "corpus model", name,
                  "See ftmodel.tools.corpus.CORPUS for the validation corpus.")
