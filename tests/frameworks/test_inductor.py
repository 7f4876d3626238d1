"""inductor lowering: kernel calls counted independently from the generated wrapper code."""

from __future__ import annotations

import copy
import re
import shutil
from typing import Any

import pytest
import torch
from torch import nn

import ftmodel
import ftmodel.frameworks.eager
from ftmodel.frameworks import inductor as ind
from ftmodel.frameworks.base import get_framework
from ftmodel.errors import InvalidArgumentError
from ftmodel.frameworks.inductor_code import name_tokens
from ftmodel.program import Program

pytestmark = [pytest.mark.slow, pytest.mark.skipif(
    shutil.which("g++") is None and shutil.which("c++") is None,
    reason="inductor on the CPU needs a C++ compiler")]

IN, HID, OUT = 16, 32, 8


def _count_calls_in_text(code: str) -> int:
    """Kernel calls in ``call()`` counted with plain regexes (independent of the ast parser)."""
    defined = set(re.findall(r"^(\w+) = async_compile\.\w+\(", code, re.MULTILINE))
    body = code[code.index("def call("):].split("\n\n")[0]
    n = 0
    for line in body.splitlines():
        line = line.strip()
        if line.startswith("#"):
            continue
        m = re.match(r"(?:\w+ = )?([\w.]+)\(", line)
        if m is None:
            continue
        fn = m.group(1)
        if fn in defined or fn.removesuffix(".run") in defined \
                or fn.startswith(("extern_kernels.", "torch.ops.", "aten.")):
            n += 1
    return n


def _build(model: nn.Module, x: torch.Tensor, batch: int) -> ind.InductorArtifact:
    return ind.build(model, x, batch, ftmodel.trace(model, x, batch))


def test_mlp_counts_match_generated_code() -> None:
    torch.manual_seed(0)
    model, b = nn.Sequential(nn.Linear(IN, HID), nn.ReLU(), nn.Linear(HID, OUT),
                             nn.GELU()).eval(), 4
    art = _build(model, torch.randn(1, IN), b)
    prog = art.program
    assert len(art.codes) == 1 and art.n_breaks == 0
    assert prog.n_launches == _count_calls_in_text(art.codes[0])
    # 2 Linear → extern addmm (bias fused in), ReLU and GELU → one generated kernel each: 4
    assert prog.n_launches == 2 + 2
    assert [k.op_class for k in prog.kernels] == ["gemm", "elementwise", "gemm", "elementwise"]
    assert prog.macs == b * IN * HID + b * HID * OUT
    assert [k.module_path for k in prog.kernels] == ["0", "1", "2", "3"]
    first = prog.kernels[0]
    # addmm(bias, x, Wᵀ, out=buf): bias 32 + x b·16 + W 16·32 read, y b·32 written (fp32)
    assert (first.bytes_read, first.bytes_written) == (4 * (HID + b * IN + IN * HID),
                                                       4 * b * HID)
    assert first.bytes_weights == 4 * (HID + IN * HID)



def test_guard_events_count_the_graphs_tensors_and_the_models_modules(
        profile_factory: Any) -> None:
    """dynamo guards every graph input (the weights and biases read, the input; a batch norm's
    unused ``num_batches_tracked`` is none) and every module; a profile with guard prices adds
    them to the call at the bytes the call touches."""
    from ftmodel.estimate.guards import bytes_touched
    from ftmodel.hardware.profile import FrameworkHost
    from ftmodel.program import GUARD_MODULE, GUARD_TENSOR
    from tests.conftest import TINY_PER_CALL_S, TINY_PER_EVENT_S

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(IN, HID), nn.BatchNorm1d(HID), nn.ReLU(),
                          nn.Sequential(nn.Linear(HID, OUT))).eval()
    prog = _build(model, torch.randn(1, IN), 4).program
    # 2 + 4 (running stats included) + 2 tensors, the input; Sequential, 4 layers, 1 nested
    assert prog.host_events[GUARD_TENSOR] == 2 + 4 + 2 + 1
    assert prog.host_events[GUARD_MODULE] == 6
    per = {k: v for k, v in TINY_PER_EVENT_S.items() if k.startswith("kernel:")}
    rows = ((0.0, 1e-6, 2e-6), (1e9, 1e-6, 2e-6))
    plain, guarded = (profile_factory(name=f"inductor-cpu-{i}", frameworks={
        "inductor": FrameworkHost(per_event_s=per, per_call_s=TINY_PER_CALL_S, guards=g)})
        for i, g in enumerate(((), rows)))
    x = torch.randn(1, IN)
    a, b = (ftmodel.predict_latency(model, "inductor", p, 4, inputs=x) for p in (plain, guarded))
    assert bytes_touched(prog.kernels) > 0
    assert b.latency_ms - a.latency_ms == pytest.approx((9 * 1e-6 + 6 * 2e-6) * 1e3)
    assert not any("guard" in w for w in a.warnings)


class _Tagger(nn.Module):
    """Embedding, a 2-layer LSTM, a linear head: dynamo does not trace the LSTM (here it
    skips the whole forward and compiles nothing)."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(50, IN)
        self.lstm = nn.LSTM(IN, HID, num_layers=2, batch_first=True)
        self.head = nn.Linear(HID, OUT)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        out, _ = self.lstm(self.emb(tokens))
        return self.head(out)


def test_recurrent_layers_run_eagerly_between_graphs_and_are_counted() -> None:
    torch.manual_seed(0)
    model, b, seq = _Tagger().eval(), 2, 12
    tokens = torch.randint(0, 50, (1, seq))
    trace = ftmodel.trace(model, tokens, b)
    art = ind.build(model, tokens, b, trace)
    assert ind.recurrent_paths(model) == ("lstm",)
    lstm = [k for k in art.program.kernels if k.module_path.startswith("lstm")]
    assert lstm, "the LSTM's kernels are missing from inductor's count"
    # its MACs: per layer and step, 4 gates of (input + hidden) x hidden, at every token
    analytic = b * seq * 4 * HID * ((IN + HID) + (HID + HID))
    assert sum(k.macs for k in lstm) == analytic
    assert art.program.macs == analytic + b * seq * HID * OUT
    assert any("recurrent" in w for w in art.program.warnings)

def test_cnn_counts_match_generated_code() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                          nn.MaxPool2d(2), nn.Flatten(), nn.Linear(8 * 4 * 4, 4),
                          nn.Softmax(-1)).eval()
    x, b = torch.randn(1, 3, 8, 8), 2
    art = _build(model, x, b)
    prog = art.program
    assert prog.n_launches == sum(_count_calls_in_text(c) for c in art.codes)
    classes = [k.op_class for k in prog.kernels]
    assert classes.count("conv") == 1 and classes.count("gemm") == 1
    assert "softmax" in classes
    # BatchNorm is fused into a generated kernel, never its own library call
    assert not any(k.members[0].startswith("extern_kernels.native_batch_norm")
                   for k in prog.kernels)
    assert prog.macs == ftmodel.trace(model, x, b).total_macs


def _cnn() -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                          nn.Conv2d(8, 8, 3, padding=1), nn.GELU(), nn.AdaptiveAvgPool2d(1),
                          nn.Flatten(), nn.Linear(8, 4), nn.Softmax(-1)).eval()
    return model, torch.randn(1, 3, 8, 8)


def _kernels(prog: Program) -> list[tuple[object, ...]]:
    return [(k.op_class, k.macs, k.bytes_read, k.bytes_written, k.variant)
            for k in prog.kernels]


def test_lowering_generates_inductors_code_without_compiling_its_kernels(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from torch._inductor import codecache

    model, x = _cnn()
    b = 3

    def no_compiler(*args: object, **kwargs: object) -> None:
        raise AssertionError("a C++ kernel was compiled for a lowering")

    with monkeypatch.context() as m:
        m.setattr(codecache.CppPythonBindingsCodeCache, "load_pybinding", no_compiler)
        m.setattr(codecache.CppPythonBindingsCodeCache, "load_pybinding_async", no_compiler)
        m.setattr(codecache.CppCodeCache, "load", no_compiler)
        code_only = ind.build(model, x, b, ftmodel.trace(model, x, b), compile_kernels=False)
    assert not code_only.runnable
    with pytest.raises(InvalidArgumentError, match="lowering only"):
        code_only.run()
    compiled = _build(model, x, b)
    # the same code (but for the graph's serial number), and so the same Program, as the
    # compiled artifact's
    def numbered_apart(codes: list[str]) -> list[str]:
        return [re.sub(r"^# AOT ID: .*$", "", c, flags=re.MULTILINE) for c in codes]

    assert numbered_apart(code_only.codes) == numbered_apart(compiled.codes)
    assert _kernels(code_only.program) == _kernels(compiled.program)
    assert code_only.program.n_launches == compiled.program.n_launches > 0


def test_a_model_compiled_after_a_lowering_runs_its_real_kernels() -> None:
    model, x = _cnn()
    b = 2
    ind.CACHE.clear()
    prog = ind.lower_model(model, x, b, ftmodel.trace(model, x, b))
    expected = model(x.expand(b, -1, -1, -1).contiguous())
    run = ind.runner(model, x, b)
    out = run()
    assert isinstance(out, torch.Tensor)
    # the stand-in kernels left nothing behind: the compiled model computes the model's values
    torch.testing.assert_close(out, expected, rtol=1e-4, atol=1e-5)
    # and a lowering now reuses the runnable artifact
    assert len(ind.CACHE) == 2  # the lowering's artifact and the runnable one
    again = ind.lower_model(model, x, b, ftmodel.trace(model, x, b))
    assert _kernels(again) == _kernels(prog) and len(ind.CACHE) == 2


def test_a_prediction_compiles_once_per_batch_it_is_asked_for(
        monkeypatch: pytest.MonkeyPatch, profile_factory: Any) -> None:
    """The crossover batch comes from the first batch's Program (as for exported graphs), not
    from two more compiles at batches 2 and 3."""
    from ftmodel.hardware.profile import FrameworkHost
    from tests.conftest import TINY_PER_CALL_S, TINY_PER_EVENT_S

    per = {k: v for k, v in TINY_PER_EVENT_S.items() if k.startswith("kernel:")}
    prof = profile_factory(name="inductor-cpu", frameworks={
        "inductor": FrameworkHost(per_event_s=per, per_call_s=TINY_PER_CALL_S)})
    built: list[int] = []
    real_build = ind.build

    def counting_build(model: nn.Module, inputs: Any, batch: int, *args: Any,
                       **kwargs: Any) -> ind.InductorArtifact:
        built.append(batch)
        return real_build(model, inputs, batch, *args, **kwargs)

    monkeypatch.setattr(ind, "build", counting_build)
    ind.CACHE.clear()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(IN, HID), nn.ReLU(), nn.Linear(HID, OUT)).eval()
    ps = ftmodel.predict_latency(model, "inductor", prof, [4, 8], inputs=torch.randn(1, IN))
    assert sorted(built) == [4, 8]
    assert ps[0].crossover_batch is None or ps[0].crossover_batch > 0
    assert ps[0].macs == 4 * (IN * HID + HID * OUT)


WRAPPER = """
cpp_fused_relu_0 = async_compile.cpp_pybinding(['const float*', 'float*'], r'''
extern "C"  void  kernel(const float* in_ptr0, float* out_ptr0) {}
''')
cpp_fused_add_1 = async_compile.cpp_pybinding(['float*', 'const float*'], r'''
extern "C"  void  kernel(float* in_out_ptr0, const float* in_ptr0) {}
''')
def call(args):
    arg0_1, arg1_1 = args
    args.clear()
    assert_size_stride(arg0_1, (4, 8), (8, 1), 'input')
    assert_size_stride(arg1_1, (8, 4), (4, 1), 'input')
    buf0 = empty_strided_cpu((4, 8), (8, 1), torch.float32)
    cpp_fused_relu_0(arg0_1, buf0)
    buf1 = empty_strided_cpu((4, 4), (4, 1), torch.float32)
    extern_kernels.mm(buf0, arg1_1, out=buf1)
    buf2 = buf0; del buf0  # reuse
    cpp_fused_add_1(buf2, reinterpret_tensor(buf1, (16,), (1,), 0))
    return (buf2, )
"""


def test_operand_identities_follow_buffers_views_and_reuse() -> None:
    """Each kernel's reads/writes name the buffer whose memory they touch (for the cache
    model): a ``# reuse`` alias and a reinterpret_tensor view are their buffer's storage."""
    prog = ind.lower_code([WRAPPER], None, batch=4)
    relu, mm, add = prog.kernels
    (x, n_x), = relu.reads
    (buf0, n_buf0), = relu.writes
    assert (n_x, n_buf0) == (4 * 4 * 8, 4 * 4 * 8)
    ids_mm = dict(mm.reads)
    assert buf0 in ids_mm and len(ids_mm) == 2  # buf0 and the weight arg1_1
    (buf1, _), = mm.writes
    assert {i for i, _ in add.reads} == {buf0, buf1}  # buf2 is buf0; the view is buf1
    assert [i for i, _ in add.writes] == [buf0]
    assert len({x, buf0, buf1, *ids_mm}) == 4


def test_eagerly_run_kernels_have_storages_of_their_own() -> None:
    """Kernels run eagerly between graphs (a recurrent layer) keep the eager trace's storage
    ids, moved past the wrappers' buffers: the cache model must not take an LSTM's gate
    buffer for a wrapper's buffer with the same small id."""
    torch.manual_seed(0)
    model, tokens = _Tagger().eval(), torch.randint(0, 50, (1, 12))
    trace = ftmodel.trace(model, tokens, 4)
    prog = ind.lower_code([WRAPPER], trace, batch=4, eager_paths=("lstm",))
    wrapper, eager = prog.kernels[:3], prog.kernels[3:]
    assert eager and all(k.module_path.startswith("lstm") for k in eager)
    ids = lambda ks: {sid for k in ks for sid, _ in (*k.reads, *k.writes)}  # noqa: E731
    assert ids(wrapper) and ids(eager) and not ids(wrapper) & ids(eager)
    # the eager kernels' own sharing is kept: the LSTM's layers read what the previous wrote
    ref = [k for k in ftmodel.frameworks.eager.lower(trace).kernels
           if k.module_path.startswith("lstm")]
    shift = min(ids(eager)) - min(ids(ref))
    assert [[(s - shift, n) for s, n in k.reads] for k in eager] == [list(k.reads) for k in ref]


def test_extern_convolution_takes_eagers_backend_variant_on_channels_last_tensors() -> None:
    # inductor on a CPU runs its 2-d convolutions on channels-last tensors: the backend eager
    # selects for those, marked _nhwc; 1-d convolutions stay contiguous and keep eager's variant
    from ftmodel.tracing.variants import NHWC

    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(),
                          nn.Conv2d(16, 16, 1)).eval()
    x = torch.randn(1, 3, 16, 16)
    cl_model = copy.deepcopy(model).to(memory_format=torch.channels_last)
    cl_trace = ftmodel.trace(cl_model, x.contiguous(memory_format=torch.channels_last), 2)
    eager_cl = [k.variant for k in ftmodel.frameworks.eager.lower(cl_trace).kernels
                if k.op_class == "conv"]
    ind_v = [k.variant for k in _build(model, x, 2).program.kernels if k.op_class == "conv"]
    assert eager_cl and all(eager_cl)
    assert sorted(ind_v) == sorted(v + NHWC for v in eager_cl)

    audio = nn.Sequential(nn.Conv1d(4, 16, 5), nn.ReLU(), nn.Conv1d(16, 16, 3)).eval()
    w = torch.randn(1, 4, 64)
    eager_1d = [k.variant for k in ftmodel.frameworks.eager.lower(ftmodel.trace(audio, w, 2)).kernels
                if k.op_class == "conv"]
    ind_1d = [k.variant for k in _build(audio, w, 2).program.kernels if k.op_class == "conv"]
    assert eager_1d and all(eager_1d) and not any(v.endswith(NHWC) for v in eager_1d)
    assert sorted(ind_1d) == sorted(eager_1d)



def test_channels_last_onednn_convolutions_copy_their_weights_on_every_call() -> None:
    # oneDNN reorders the channels-last weights inductor hands aten into its blocked layout on
    # every call: a weight-sized buffer of the convolution's own (Kernel.bytes_scratch), which
    # the heap simulation allocates for its duration; contiguous 1-d convolutions get none here
    from ftmodel.estimate.allocator import allocations
    from ftmodel.tracing.variants import channels_last_reorders_weights

    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(),
                          nn.Conv2d(16, 32, 1)).eval()
    prog = _build(model, torch.randn(1, 3, 16, 16), 2).program
    convs = [k for k in prog.kernels if k.op_class == "conv"]
    assert len(convs) == 2 and all(channels_last_reorders_weights(k.variant) for k in convs)
    assert sorted(k.bytes_scratch for k in convs) == [4 * 16 * 3 * 9, 4 * 32 * 16]
    assert all(k.bytes_scratch == 0 for k in prog.kernels if k not in convs)
    scratch = sorted(a.size_bytes for a in allocations(prog.kernels) if a.sid < 0)
    assert scratch == [4 * 16 * 3 * 9, 4 * 32 * 16]

    audio = nn.Sequential(nn.Conv1d(4, 16, 5), nn.ReLU()).eval()
    prog_1d = _build(audio, torch.randn(1, 4, 64), 2).program
    assert all(k.bytes_scratch == 0 for k in prog_1d.kernels)
    assert not channels_last_reorders_weights("slow2d_nhwc")
    assert not channels_last_reorders_weights("mkldnn")


def test_channels_last_copies_of_the_input_and_of_kxk_weights_are_transposed_bytes() -> None:
    # without freezing, inductor copies the graph's NCHW input and every convolution's k x k
    # weights into channels-last on every call, and its channels-last result back to NCHW; a
    # 1x1 convolution's weights are already in that order, and a 1-d network is contiguous
    from ftmodel.tracing.variants import TRANSPOSE

    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
                          nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(),
                          nn.Conv2d(32, 8, 1)).eval()
    prog = _build(model, torch.randn(1, 3, 16, 16), 2).program
    image, weights, out = 4 * 2 * 3 * 16 * 16, 4 * (16 * 3 * 9 + 32 * 16 * 9), 4 * 2 * 8 * 16 * 16
    assert sum(k.bytes_transposed for k in prog.kernels) == image + weights + out
    assert all(k.bytes_transposed == 0 for k in prog.kernels if k.op_class == "conv")
    pure = [k for k in prog.kernels if k.variant == TRANSPOSE]
    assert pure and all(k.op_class == "copy" and k.bytes_transposed == k.bytes_read
                        for k in pure)
    fused = [k for k in prog.kernels if k.bytes_transposed and k.variant != TRANSPOSE]
    assert fused and all(k.bytes_transposed <= k.bytes_read for k in fused)

    audio = nn.Sequential(nn.Conv1d(4, 16, 5), nn.ReLU(), nn.Conv1d(16, 16, 5)).eval()
    assert all(k.bytes_transposed == 0
               for k in _build(audio, torch.randn(1, 4, 64), 2).program.kernels)


def test_name_tokens() -> None:
    vocab = frozenset({"_native_batch_norm_legit_no_training", "relu", "max_pool2d_with_indices",
                       "add", "convolution"})
    assert name_tokens("cpp_fused__native_batch_norm_legit_no_training_convolution_relu_1",
                       vocab) == ["_native_batch_norm_legit_no_training", "convolution", "relu"]
    assert name_tokens("triton_poi_fused_add_relu_0", vocab) == ["add", "relu"]


def test_registry_aliases() -> None:
    for alias in ("inductor", "torch.compile", "compile"):
        fw = get_framework(alias)
        assert fw.name == "inductor" and fw.lower_model is not None and fw.runner is not None


GATHER_AND_EXPAND = """
cpp_fused_embedding_0 = async_compile.cpp_pybinding(['const int64_t*', 'const float*', 'float*'], r'''
extern "C"  void  kernel(const int64_t* in_ptr0, const float* in_ptr1, float* out_ptr0) {}
''')
cpp_fused_clone_index_1 = async_compile.cpp_pybinding(['const float*', 'float*'], r'''
extern "C"  void  kernel(const float* in_ptr0, float* out_ptr0) {}
''')
def call(args):
    arg0_1, arg1_1, arg2_1 = args
    args.clear()
    assert_size_stride(arg0_1, (4, 16), (16, 1), 'input')
    assert_size_stride(arg1_1, (50000, 256), (256, 1), 'input')
    assert_size_stride(arg2_1, (4, 2, 128, 64), (16384, 8192, 64, 1), 'input')
    buf0 = empty_strided_cpu((4, 16, 256), (4096, 256, 1), torch.float32)
    cpp_fused_embedding_0(arg0_1, arg1_1, buf0)
    buf1 = empty_strided_cpu((4, 8, 128, 64), (65536, 8192, 64, 1), torch.float32)
    cpp_fused_clone_index_1(arg2_1, buf1)
    return (buf0, buf1, )
"""


def test_a_fused_indexing_kernel_that_expands_is_a_copy_not_a_gather() -> None:
    """A gather reads a table larger than what it writes and is priced on the gather curve;
    a kernel with an indexing op that writes more than it reads (grouped keys and values
    repeated for every head, in a decode step) is a copy of the bytes it moves."""
    gather, expand = ind.lower_code([GATHER_AND_EXPAND], None, batch=4).kernels
    assert gather.op_class == "embedding"
    assert expand.op_class == "copy"
    assert expand.bytes_total == (4 * 2 + 4 * 8) * 128 * 64 * 4


def test_runners_stay_compiled_past_dynamos_default_recompile_limit() -> None:
    # ten nn.Sequential of different shapes share Sequential.forward's code object: past
    # dynamo's default limit of 8 compiled versions, it would run the rest eagerly (here: raise)
    torch.manual_seed(0)
    models = [nn.Sequential(nn.Linear(4 + i, 4), nn.ReLU()).eval() for i in range(10)]
    inputs = [torch.randn(1, 4 + i) for i in range(10)]
    runs = [ind.runner(m, x, 1) for m, x in zip(models, inputs)]
    assert torch._dynamo.config.recompile_limit >= ind.RUNNERS_RECOMPILE_LIMIT
    with torch._dynamo.config.patch(fail_on_recompile_limit_hit=True):
        outs = [run() for run in runs]
    with torch.no_grad():
        for m, x, out in zip(models, inputs, outs):
            torch.testing.assert_close(out, m(x))
