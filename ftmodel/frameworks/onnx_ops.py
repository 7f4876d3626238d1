"""What each ONNX / ONNX Runtime op type is to ftmodel: its op class, whether it launches a
kernel, and element sizes of ONNX tensor types (used by :mod:`ftmodel.frameworks.onnx_graph`)."""

from __future__ import annotations

__all__ = ["CLASS_OF", "DTYPE_NAME", "ELEMENTWISE_OPS", "ELEM_SIZE", "MATH_OPS", "MATMUL_OPS",
           "NORM_VARIANTS", "SKIP_OPS", "VIEW_OPS", "Shape", "classify_node", "op_class_of"]

Shape = tuple[int, ...]

VIEW_OPS = frozenset({"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Dropout",
                      "Shape", "Size"})
SKIP_OPS = frozenset({"Constant"})

CLASS_OF: dict[str, str] = {}  # op type -> op class (MatMul's depends on ranks: op_class_of)
for _cls, _ops in {
    "conv": ["Conv", "FusedConv", "ConvTranspose", "NhwcConv", "QLinearConv", "ConvInteger",
             "NhwcFusedConv"],
    "gemm": ["Gemm", "FusedGemm", "QGemm", "MatMulNBits", "MatMulInteger", "QLinearMatMul",
             "MatMulIntegerToFloat", "DynamicQuantizeMatMul", "LSTM", "GRU", "RNN"],
    "bmm": ["Einsum"],
    "attention": ["Attention", "MultiHeadAttention", "GroupQueryAttention", "PackedAttention",
                  "PackedMultiHeadAttention", "DecoderMaskedMultiHeadAttention",
                  "DecoderMaskedSelfAttention", "SparseAttention", "QAttention"],
    "norm": ["LayerNormalization", "SkipLayerNormalization", "SimplifiedLayerNormalization",
             "SkipSimplifiedLayerNormalization", "BatchNormalization", "InstanceNormalization",
             "GroupNormalization", "GroupNorm", "SkipGroupNorm", "LpNormalization",
             "MeanVarianceNormalization", "RMSNormalization"],
    "softmax": ["Softmax", "LogSoftmax", "BiasSoftmax"],
    "pool": ["MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool", "LpPool",
             "GlobalLpPool", "MaxRoiPool", "RoiAlign"],
    "reduction": ["ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1",
                  "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare", "ArgMax",
                  "ArgMin", "TopK", "CumSum"],
    "embedding": ["Gather", "GatherElements", "GatherND", "ScatterND", "ScatterElements",
                  "Scatter", "EmbedLayerNormalization", "Compress", "NonZero", "OneHot"],
    "copy": ["Concat", "Split", "Slice", "Transpose", "Pad", "Tile", "Expand", "Resize",
             "Upsample", "ReorderInput", "ReorderOutput", "Cast", "CastLike", "ConstantOfShape",
             "Range", "DepthToSpace", "SpaceToDepth", "Trilu", "MemcpyToHost", "MemcpyFromHost",
             "EyeLike", "Where", "ReverseSequence"],
}.items():
    for _op in _ops:
        CLASS_OF[_op] = _cls
MATMUL_OPS = frozenset({"MatMul", "FusedMatMul"})  # gemm or bmm by their operands' ranks
MATH_OPS = frozenset({"Erf", "Exp", "Log", "Tanh", "Sigmoid", "Gelu", "FastGelu", "BiasGelu",
                      "QuickGelu", "Pow", "Sqrt", "Sin", "Cos", "Tan", "Softplus", "Elu", "Selu",
                      "Celu", "Mish", "Atan", "Asin", "Acos", "Sinh", "Cosh", "HardSigmoid",
                      "ThresholdedRelu", "Softsign"})
# ONNX Runtime's layer norms, by CPU kernel: its fused residual ones (``SkipLayerNormalization``,
# ``SkipSimplifiedLayerNormalization``; onnxruntime/contrib_ops/cpu/skip_layer_norm.cc, a scalar
# loop per row) ran 3.5-11x slower than its ``LayerNormalization`` of the same tensor on the EPYC
NORM_VARIANTS = {"SkipLayerNormalization": "skip", "SkipSimplifiedLayerNormalization": "skip",
                 "LayerNormalization": "layer", "SimplifiedLayerNormalization": "layer"}
ELEMENTWISE_OPS = MATH_OPS | frozenset({
    "Add", "Sub", "Mul", "Div", "Relu", "LeakyRelu", "PRelu", "Clip", "Abs", "Neg", "Ceil",
    "Floor", "Round", "Sign", "Reciprocal", "Max", "Min", "Mean", "Sum", "Mod", "Equal",
    "Greater", "GreaterOrEqual", "Less", "LessOrEqual", "Not", "And", "Or", "Xor", "IsNaN",
    "IsInf", "BitShift", "HardSwish", "BiasAdd", "BiasDropout", "QuickGelu", "QuantizeLinear",
    "DequantizeLinear", "DynamicQuantizeLinear", "Shrink", "Swish", "SiLU",
})
# ONNX TensorProto element type -> bytes per element, and -> ftmodel's dtype name
ELEM_SIZE = {1: 4, 2: 1, 3: 1, 4: 2, 5: 2, 6: 4, 7: 8, 9: 1, 10: 2, 11: 8, 12: 4, 13: 8,
             16: 2, 14: 8, 15: 16}
DTYPE_NAME = {1: "float32", 10: "float16", 16: "bfloat16", 11: "float64", 7: "int64",
              6: "int32", 3: "int8", 2: "uint8", 9: "bool"}


def op_class_of(op_type: str, a_rank: int = 0, b_rank: int = 0, group: int = 1) -> str:
    """The ftmodel op class of an ONNX / ORT op type (domain stripped)."""
    if op_type in MATMUL_OPS:
        return "bmm" if a_rank >= 3 and b_rank >= 3 else "gemm"
    cls = CLASS_OF.get(op_type)
    if cls == "conv" and group > 1:
        return "conv_grouped"
    if cls is not None:
        return cls
    return "elementwise" if op_type in ELEMENTWISE_OPS else "other"


def classify_node(op_type: str) -> str:
    """"skip" | "view" | "kernel" — how a node of this type is counted."""
    if op_type in SKIP_OPS:
        return "skip"
    return "view" if op_type in VIEW_OPS else "kernel"
