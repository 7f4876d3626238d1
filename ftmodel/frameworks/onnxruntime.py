"""ONNX Runtime: export to ONNX, let ORT optimize the graph, count the nodes it will run.

Pipeline (all inputs static, at the requested batch):

1. **Export** with ``torch.onnx.export(..., dynamo=False, opset_version=17)``: the
   TorchScript-based exporter, deterministic (same node names run after run) and naming nodes by
   module scope ("/layer1/layer1.0/conv1/Conv"), which gives module paths. torch 2.14 still
   ships it (deprecated). Where it is gone (``dynamo=False`` rejected) or cannot export the model
   (an op it has no conversion for, e.g. ``aten::diff`` in Hugging Face's GPT-2), the export uses
   ``dynamo=True`` (the torch.export-based exporter, which needs onnxscript), as users do; a
   warning on the Program says so. If both fail, the first exporter's error is reported. The model is wrapped in a forward of positional tensors
   (:class:`~ftmodel.frameworks._common.PositionalModule`), so keyword-only models export too.
2. **Optimize**: an ``InferenceSession`` with ``GraphOptimizationLevel.ORT_ENABLE_ALL`` for the
   provider (``CPUExecutionProvider`` for a CPU profile, ``CUDAExecutionProvider`` for a GPU
   one), saving the graph it will run via ``SessionOptions.optimized_model_filepath``. ORT
   silently falls back to the CPU when a provider cannot load; that is checked and reported
   as :class:`~ftmodel.errors.BackendUnavailable` naming what is missing and how to install it.
   For a GPU profile on a machine where the CUDA EP is not usable (no GPU), the CUDA EP's graph
   is reproduced on the CPU EP instead (:mod:`ftmodel.frameworks.onnx_cuda`: ORT's level 1-2
   transformers without the CPU-only ones, ONNX Runtime 1.12's CUDA conv-activation fusion,
   float tensors priced in the requested dtype); the Program carries a warning saying so and
   the artifact cannot run (``runner`` raises BackendUnavailable).
3. **Lower** the optimized graph with :func:`ftmodel.frameworks.onnx_graph.lower_onnx` (one
   Kernel per launching node, views as host events, MACs/bytes from the node shapes).

Host events: ``kernel:<class>`` per kernel and ``view`` per aliasing node; the per-``run`` cost
is the host profile's ``per_call_s``. There are no module calls. Models ONNX cannot express
raise :class:`~ftmodel.errors.FrameworkUnsupported` (see :mod:`ftmodel.frameworks.feasibility`).
Sessions are cached per (model, batch, dtype, provider, input shapes) in a small LRU, so
repeated predictions and :func:`runner` reuse one export; a prediction for another instance of
the same architecture (:func:`~ftmodel.frameworks.artifact_cache.structure_key`) reuses its Program.
"""

from __future__ import annotations

import functools
import re
import tempfile
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ftmodel.errors import BackendUnavailable, FrameworkUnsupported, InvalidArgumentError
from ftmodel.frameworks import feasibility, onnx_cuda
from ftmodel.frameworks.artifact_cache import ArtifactCache
from ftmodel.frameworks._common import (
    PositionalModule,
    eval_no_grad,
    input_signature,
    model_in_dtype,
    module_names,
    module_path_from_scope,
    real_inputs,
    silenced_output,
    trace_dtype,
)
from ftmodel.frameworks.base import Framework, register
from ftmodel.program import Program
from ftmodel.frameworks.onnx_graph import lower_onnx
from ftmodel.tracing.inputs import InputSpec
from ftmodel.tracing.records import Trace

__all__ = [
    "CACHE",
    "OPSET",
    "OrtArtifact",
    "build",
    "check_provider",
    "lower",
    "lower_model",
    "provider_for",
    "runner",
]

NAME = "onnxruntime"
OPSET = 17
PROVIDERS = {"cpu": "CPUExecutionProvider", "cuda": "CUDAExecutionProvider",
             "gpu": "CUDAExecutionProvider"}
_INSTALL_HINTS = {
    "CUDAExecutionProvider": (
        "it needs an NVIDIA GPU and driver plus the CUDA and cuDNN runtime libraries that this "
        "onnxruntime-gpu build was compiled against (see onnxruntime.ai/docs/execution-"
        "providers/CUDA-ExecutionProvider.html#requirements), e.g. `pip install "
        "onnxruntime-gpu[cuda,cudnn]`, with the libraries on LD_LIBRARY_PATH"),
    "TensorrtExecutionProvider": (
        "it needs an NVIDIA GPU, the CUDA EP's libraries and TensorRT (`pip install tensorrt` "
        "or NVIDIA's TensorRT packages) on LD_LIBRARY_PATH"),
}
_DEFAULT_HINT = ("install an onnxruntime build that includes it (e.g. `pip install "
                 "onnxruntime-gpu` for CUDA) and its system libraries")


def provider_for(device: str) -> str:
    """The execution provider for a profile's device type ("cpu" | "cuda")."""
    key = str(device).split(":")[0].lower()
    if key not in PROVIDERS:
        raise InvalidArgumentError(f"device must be 'cpu' or 'cuda' for onnxruntime, got "
                                   f"{device!r}")
    return PROVIDERS[key]


@functools.cache
def _provider_problem(provider: str) -> str | None:
    import onnxruntime as ort
    available = ort.get_available_providers()
    if provider not in available:
        return (f"this onnxruntime {ort.__version__} build does not include it (it has: "
                f"{', '.join(available)})")
    if provider == "CPUExecutionProvider":
        return None
    # A tiny Identity model: ORT falls back to the CPU without raising when a provider's
    # libraries are missing, so check which provider the session really got.
    from onnx import TensorProto, helper
    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"])], "probe",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                              ir_version=8)  # any ORT since 1.10 reads IR 8
    so = ort.SessionOptions()
    so.log_severity_level = 4
    try:
        # ORT's default logger prints the provider library's load failure (libcuda missing on
        # a CPU-only machine) in red from C++, whatever the session's severity
        with warnings.catch_warnings(), silenced_output():
            warnings.simplefilter("ignore")
            sess = ort.InferenceSession(proto.SerializeToString(), so, providers=[provider])
    except Exception as err:  # noqa: BLE001 - any failure means the provider is unusable
        return f"creating a session with it failed ({type(err).__name__}: {err})"
    got = sess.get_providers()
    if not got or got[0] != provider:
        return (f"onnxruntime {ort.__version__} lists it but could not load it and fell back to "
                f"{', '.join(got) or 'nothing'}")
    return None


def check_provider(provider: str) -> None:
    """Raise BackendUnavailable (what is missing, how to install it) unless usable here."""
    problem = _provider_problem(provider)
    if problem is not None:
        hint = _INSTALL_HINTS.get(provider, _DEFAULT_HINT)
        raise BackendUnavailable(
            f"onnxruntime execution provider {provider!r} is not usable on this machine: "
            f"{problem}. To use it, {hint}. Predicting onnxruntime for a GPU profile builds the "
            "session that the GPU would run, so it needs that provider here.")


@dataclass
class OrtArtifact:
    """An exported, optimized ONNX Runtime session and what it was lowered to."""

    session: Any  # onnxruntime.InferenceSession; None for an emulated CUDA graph
    feeds: dict[str, Any]  # input name -> numpy array
    program: Program
    provider: str
    exporter: str  # "torchscript" | "dynamo"
    node_ops: tuple[str, ...]  # op types of the optimized graph, in order
    profile_file: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def run(self) -> object:
        if self.session is None:
            raise BackendUnavailable("this ONNX Runtime artifact was reproduced for prediction "
                                     "only (emulated CUDA graph); it cannot run here")
        return self.session.run(None, self.feeds)


CACHE: ArtifactCache[OrtArtifact] = ArtifactCache(maxsize=4)


def _export(wrapper: PositionalModule, path: Path) -> str:
    """Export ``wrapper`` to ONNX at ``path``; returns the exporter used. PyTorch's fused
    ``nn.MultiheadAttention`` fast path (``_native_multi_head_attention``, taken in eval mode
    under ``no_grad``, e.g. by torchvision's ViT) has no ONNX conversion, so it is switched off
    for the export (and restored): the exported graph is the composite attention."""
    names = [f"input_{i}" for i in range(len(wrapper.example))]
    fastpath = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(False)
    try:
        return _export_unfused(wrapper, path, names)
    finally:
        torch.backends.mha.set_fastpath_enabled(fastpath)


def _export_unfused(wrapper: PositionalModule, path: Path, names: list[str]) -> str:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # deprecation notices, TracerWarnings (see feasibility)
        first_error: Exception | None = None
        try:
            with silenced_output():  # it prints the IR graph when it fails
                torch.onnx.export(wrapper, wrapper.example, str(path), dynamo=False,
                                  opset_version=OPSET, do_constant_folding=True,
                                  input_names=names)
            return "torchscript"
        except TypeError as err:
            if "dynamo" not in str(err):
                first_error = err
        except Exception as err:  # noqa: BLE001 - an op the TorchScript exporter cannot convert
            first_error = err
        try:  # the torch.export-based exporter, as users fall back to it
            with silenced_output():
                program = torch.onnx.export(wrapper, wrapper.example, dynamo=True,
                                            opset_version=OPSET, input_names=names,
                                            verbose=False)
        except Exception:
            if first_error is not None:
                raise first_error from None  # name what the common exporter could not do
            raise
        if program is None:
            raise RuntimeError("torch.onnx.export(dynamo=True) returned no program")
        program.save(str(path))
        return "dynamo"


_NODE_IN_ERROR = re.compile(r"(\w+)\(\d+\) node with name '([^']*)'")


def _session_error(err: Exception, names: frozenset[str]) -> FrameworkUnsupported:
    text = str(err)
    m = _NODE_IN_ERROR.search(text)
    op, path = ("<session>", "")
    if m is not None:
        op = m.group(1)
        scope = m.group(2).split("/")[1:] if "/" in m.group(2) else []
        path = module_path_from_scope(scope, names, PositionalModule.PREFIX)
    return FrameworkUnsupported(NAME, op, path, f"onnxruntime could not build a session: "
                                f"{text.strip().splitlines()[0][:300] if text.strip() else err}")


def build(model: nn.Module, inputs: InputSpec, batch: int, trace: Trace | None = None, *,
          dtype: str = "fp32", provider: str = "CPUExecutionProvider",
          enable_profiling: bool = False, profile_dir: str | None = None,
          emulate_cuda: bool = False) -> OrtArtifact:
    """Export, optimize and lower (uncached). ``enable_profiling`` turns on ORT's profiler
    (its JSON lands in ``profile_dir``, default the system temp dir; call
    ``artifact.session.end_profiling()`` after running). ``emulate_cuda`` reproduces the CUDA
    EP's graph on the CPU EP (:mod:`ftmodel.frameworks.onnx_cuda`): nothing is run, the
    artifact has no session."""
    import onnx

    feasibility.precheck(NAME, trace)
    if not emulate_cuda:
        check_provider(provider)
    export_dtype = "fp32" if emulate_cuda else dtype
    net = model_in_dtype(model, export_dtype, "cpu")
    inp = real_inputs(model, inputs, batch, export_dtype, "cpu")
    names = module_names(net)
    with eval_no_grad(net), tempfile.TemporaryDirectory(prefix="ftmodel-ort-") as tmp:
        exported, optimized_path = Path(tmp) / "model.onnx", Path(tmp) / "optimized.onnx"
        wrapper = PositionalModule(net, inp)
        try:
            exporter = _export(wrapper, exported)
        except FrameworkUnsupported:
            raise
        except Exception as err:
            raise feasibility.from_export_error(NAME, err, trace) from err
        session = None
        try:
            if emulate_cuda:
                optimized = onnx_cuda.cuda_graph_on_cpu(exported, optimized_path,
                                                        torch.get_num_threads())
            else:
                session = _session(exported, optimized_path, provider, enable_profiling,
                                   profile_dir)
                optimized = onnx.load(str(optimized_path), load_external_data=False)
        except Exception as err:
            raise _session_error(err, names) from err
        original = onnx.load(str(exported), load_external_data=False)
    notes = [] if exporter == "torchscript" else [(
        "exported with the dynamo ONNX exporter (the TorchScript-based one could not export "
        "this model or is unavailable); node names carry fewer module paths")]
    float_elem = None
    if emulate_cuda:
        onnx_cuda.fuse_conv_activation_cuda(optimized, dtype)
        notes.append(onnx_cuda.EMULATION_NOTE)
        float_elem = _FLOAT_ELEM[dtype]
    program = lower_onnx(optimized, framework=NAME, batch=batch, original=original,
                         module_names=names, strip_prefix=PositionalModule.PREFIX,
                         extra_warnings=notes, float_elem=float_elem)
    by_name = {f"input_{i}": t for i, t in enumerate(wrapper.example)}
    feed_names = [i.name for i in session.get_inputs()] if session is not None else []
    feeds = {n: by_name[n].detach().cpu().numpy() for n in feed_names if n in by_name}
    return OrtArtifact(session, feeds, program, provider, exporter,
                       tuple(n.op_type for n in optimized.graph.node),
                       extra={"emulated_cuda": emulate_cuda})


_FLOAT_ELEM = {"fp32": 1, "tf32": 1, "fp16": 10, "bf16": 16}  # ONNX TensorProto elem types


def _session(exported: Path, optimized_path: Path, provider: str, enable_profiling: bool,
             profile_dir: str | None) -> Any:
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.optimized_model_filepath = str(optimized_path)
    so.log_severity_level = 3
    so.intra_op_num_threads = max(1, torch.get_num_threads())
    if enable_profiling:
        so.enable_profiling = True
        so.profile_file_prefix = str(Path(profile_dir or tempfile.gettempdir())
                                     / "ftmodel_ort_profile")
    return ort.InferenceSession(str(exported), so, providers=[provider])


def _emulate(provider: str, emulate: bool | None) -> bool:
    """Reproduce the CUDA EP's graph on the CPU EP? Always when asked; automatically when the
    CUDA EP is not usable here; never for other providers."""
    if provider != PROVIDERS["cuda"]:
        if emulate:
            raise InvalidArgumentError(f"emulate=True reproduces the CUDA execution provider's "
                                       f"graph; it does not apply to {provider!r}")
        return False
    if emulate is not None:
        return emulate
    return _provider_problem(provider) is not None


def _artifact(model: nn.Module, inputs: InputSpec, batch: int, trace: Trace | None,
              device: str, dtype: str | None, provider: str | None,
              emulate: bool | None = None, shared: bool = False) -> OrtArtifact:
    """The cached artifact; ``shared``: one built for another model of the same structure
    will do (its Program, not its session, is what the caller uses)."""
    dtype = dtype or trace_dtype(trace)
    provider = provider or provider_for(device)
    feasibility.precheck(NAME, trace)
    emulated = _emulate(provider, emulate)
    if not emulated:
        check_provider(provider)
    with torch.no_grad():
        sig = input_signature(real_inputs(model, inputs, batch, dtype, "cpu"))
    return CACHE.get_or_build(
        model, (batch, dtype, provider, emulated, sig),
        lambda: build(model, inputs, batch, trace, dtype=dtype, provider=provider,
                      emulate_cuda=emulated), by_structure=shared)


def lower_model(model: nn.Module, inputs: InputSpec, batch: int, trace: Trace | None = None, *,
                device: str = "cpu", dtype: str | None = None,
                provider: str | None = None, emulate: bool | None = None) -> Program:
    """The Program ONNX Runtime runs for ``model`` at ``batch`` (cached; see module doc).
    ``emulate`` (CUDA only): reproduce the CUDA EP's graph on the CPU EP; default: when the
    CUDA EP is not usable here."""
    return _artifact(model, inputs, batch, trace, device, dtype, provider, emulate,
                     shared=True).program


def runner(model: nn.Module, inputs: InputSpec, batch: int, *, device: str = "cpu",
           dtype: str = "fp32", provider: str | None = None) -> Callable[[], object]:
    """A zero-argument callable running one inference of the cached session."""
    art = _artifact(model, inputs, batch, None, device, dtype, provider)
    if art.session is None:
        raise BackendUnavailable(
            f"onnxruntime cannot run on {provider or provider_for(device)!r} here: the CUDA "
            "execution provider is not usable on this machine (its graph was only reproduced "
            "for prediction); live measurement needs an NVIDIA GPU with onnxruntime-gpu's CUDA "
            "libraries")
    return art.run


def lower(trace: Trace) -> Program:
    raise InvalidArgumentError(
        "onnxruntime lowers from the model itself (export + ORT's optimized graph), not from a "
        "Trace; call Framework.lower_model(model, inputs, batch, trace)")


FRAMEWORK = register(Framework(
    NAME, lower, description="ONNX Runtime (TorchScript-based ONNX export, ORT_ENABLE_ALL)",
    lower_model=lower_model, runner=runner, settle_s=0.02, exports_graph=True,
    requires=("onnx", "onnxruntime")))
