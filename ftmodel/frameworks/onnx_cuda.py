"""The graph ONNX Runtime's CUDA execution provider runs, built without a GPU.

Predicting ``onnxruntime`` for a GPU profile needs the graph ORT optimizes *for the CUDA EP*.
When that provider is usable here, :mod:`ftmodel.frameworks.onnxruntime` builds the real
session. Otherwise (no GPU, no CUDA libraries) this module reproduces it on the CPU EP:

1. **Levels 1 and 2 of ORT's graph transformers, minus the CPU-only ones.** ORT registers each
   level-2 fusion with the execution providers it applies to
   (``onnxruntime/core/optimizer/graph_transformer_utils.cc``, ``GenerateTransformers``).
   Level 1 (constant folding, Conv+BatchNorm/Add/Mul folding, MatMul+Add -> Gemm, Gelu and
   LayerNorm fusion, ...) runs for every provider. Of level 2, the fusions listed for CUDA —
   Gelu, LayerNorm, SimplifiedLayerNorm, Attention, EmbedLayerNorm, Gather->Split/Slice,
   MatMul+Transpose, BiasGelu, SkipLayerNorm, FastGelu, QuickGelu, BiasSoftmax, MatMul+Scale —
   are also listed for the CPU, so a CPU session at ``ORT_ENABLE_EXTENDED`` applies them to
   the same nodes. The ones registered for the CPU only (:data:`CPU_ONLY_TRANSFORMERS`) are
   switched off with ``InferenceSession(..., disabled_optimizers=...)``, and level 3 (the
   CPU's NCHWc/NHWC layouts, Conv+Add+Activation) is not run. CUDA-only level-2 fusions
   (BiasDropout, GroupQueryAttention) match nothing in an inference graph of the models
   ftmodel targets (dropout is removed at level 1; no grouped-query attention pattern) and are
   not reproduced.
2. **The CUDA conv-activation fusion of the modelled ONNX Runtime version**
   (:func:`fuse_conv_activation_cuda`). ONNX Runtime 1.12 — the version behind the paper's
   measurements and the built-in profiles' fitted ``onnxruntime`` costs — fuses, on the CUDA EP
   only, ``Conv -> Relu`` and ``Conv -> Add -> Relu`` into ``com.microsoft::FusedConv``
   (cuDNN's conv-bias-activation), and only for float32 inputs (the CUDA ``FusedConv`` kernel
   is registered for float only; onnxruntime PR #6653, and #12058 for Conv+Add+Relu in 1.12).
   Newer releases dropped the CUDA EP from ``ConvActivationFusion``'s providers.
3. **Precision.** The graph is exported and optimized in float32 (the CPU EP has no float16
   kernel for most ops and would insert ``Cast`` nodes the CUDA EP does not need); the lowering
   then prices every float tensor in the requested dtype. ORT's level 1/2 fusions do not depend
   on the float type; the one that does (step 2) is applied per dtype.

Checked against the paper's torch.profiler traces of ResNet-50 on the Quadro RTX 8000
(``kernel_traces_rtx8000.csv``; ``tests/frameworks/test_onnx_cuda.py``): fp32, 56 kernel nodes, launching
73–130 kernels with cuDNN's helper kernels; fp16, 121 nodes, 240–283 kernels.
"""

from __future__ import annotations

import warnings
from collections import Counter
from pathlib import Path
from typing import Any

__all__ = ["CPU_ONLY_TRANSFORMERS", "CUDA_RULES", "DEFAULT_CUDA_RULES", "EMULATION_NOTE",
           "cuda_graph_on_cpu", "fuse_conv_activation_cuda"]

# Level-2 transformers that GenerateTransformers registers for the CPU EP (or CPU/ACL/DML) but
# not for the CUDA EP. (Names as GraphTransformer::Name() reports them.)
CPU_ONLY_TRANSFORMERS = (
    "GemmActivationFusion", "MatMulIntegerToFloatFusion", "DynamicQuantizeMatMulFusion",
    "ConvActivationFusion", "QDQS8ToU8Transformer", "MatMulNBitsFusion",
    "Avx2WeightS8ToU8Transformer", "NchwcTransformer", "NhwcTransformer",
    "ConvAddActivationFusion",
)
CUDA_RULES = ("ort-1.12",)
DEFAULT_CUDA_RULES = "ort-1.12"
EMULATION_NOTE = (
    "onnxruntime's CUDA execution provider is not usable here: the CUDA graph was reproduced on "
    "the CPU EP (ORT levels 1-2 without CPU-only fusions, plus ONNX Runtime 1.12's CUDA "
    "Conv+Relu / Conv+Add+Relu fusion for fp32), see ftmodel.frameworks.onnx_cuda")


def cuda_graph_on_cpu(exported: Path, optimized: Path, threads: int = 1) -> Any:
    """Optimize ``exported`` on the CPU EP as ORT would for the CUDA EP (steps 1 of the module
    doc); returns the saved optimized ONNX model (``onnx.ModelProto``)."""
    import onnx
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    so.optimized_model_filepath = str(optimized)
    so.log_severity_level = 3
    so.intra_op_num_threads = max(1, threads)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ort.InferenceSession(str(exported), so, providers=["CPUExecutionProvider"],
                             disabled_optimizers=list(CPU_ONLY_TRANSFORMERS))
    return onnx.load(str(optimized), load_external_data=False)


def _consumers(graph: Any) -> Counter[str]:
    uses: Counter[str] = Counter()
    for n in graph.node:
        uses.update(i for i in n.input if i)
    uses.update(o.name for o in graph.output)  # a graph output counts as a consumer
    return uses


def fuse_conv_activation_cuda(model: Any, dtype: str, rules: str = DEFAULT_CUDA_RULES) -> int:
    """ONNX Runtime 1.12's CUDA ``ConvActivationFusion`` on ``model`` (in place); returns the
    number of fusions. fp32 only: ``Conv -> Relu`` and ``Conv -> Add -> Relu`` (each
    intermediate consumed once, none a graph output) become one ``com.microsoft::FusedConv``
    with ``activation="Relu"`` (and the Add's other operand as input ``Z``)."""
    from onnx import helper

    if rules not in CUDA_RULES:
        raise ValueError(f"unknown ONNX Runtime CUDA rule set {rules!r}; known: "
                         f"{', '.join(CUDA_RULES)}")
    if dtype not in ("fp32", "tf32"):
        return 0  # the CUDA FusedConv kernel is registered for float32 only
    g = model.graph
    uses = _consumers(g)
    consumer = {i: n for n in g.node for i in n.input if i}
    removed: set[int] = set()
    new_nodes: dict[int, Any] = {}
    count = 0
    for conv in g.node:
        if conv.op_type != "Conv" or (conv.domain or "") != "" or id(conv) in removed:
            continue
        out = conv.output[0]
        nxt = consumer.get(out)
        if uses[out] != 1 or nxt is None or id(nxt) in removed:
            continue
        chain, z = [nxt], None
        if nxt.op_type == "Add" and (nxt.domain or "") == "":
            last = consumer.get(nxt.output[0])
            if uses[nxt.output[0]] != 1 or last is None or last.op_type != "Relu" or \
                    id(last) in removed:
                continue
            z = next((i for i in nxt.input if i != out), None)
            chain.append(last)
        elif nxt.op_type != "Relu":
            continue
        ins = list(conv.input) + [""] * (3 - len(conv.input))
        fused = helper.make_node(
            "FusedConv", ins + ([z] if z else []), list(chain[-1].output),
            name="_".join([conv.name, *(c.name for c in chain)]), domain="com.microsoft",
            activation="Relu")
        fused.attribute.extend(a for a in conv.attribute)
        new_nodes[id(conv)] = fused
        removed.update(id(c) for c in chain)
        count += 1
    if count:
        nodes = [new_nodes.get(id(n), n) for n in g.node if id(n) not in removed]
        del g.node[:]
        g.node.extend(nodes)
        if not any(o.domain == "com.microsoft" for o in model.opset_import):
            model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    return count
