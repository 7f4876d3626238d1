"""Inductor's generated code without compiling its C++ kernels: all that lowering reads.

:mod:`ftmodel.frameworks.inductor_lower` prices the wrapper code inductor generates; it reads
the code's text only. Compiling the C++ kernels that code defines (a compiler run per fused
kernel) is most of ``torch.compile``'s time on a CPU, and nothing the lowering reads. Inside
:func:`kernels_not_compiled`, inductor generates its wrapper and kernel sources exactly as it
would, but each C++ kernel is a stand-in that does nothing: the warm-up call that captures the
code runs the graph's extern kernels (aten's GEMMs and convolutions) on real tensors and leaves
the generated kernels' outputs unwritten (uninitialised memory, never zeroed: a kernel that
would write into a buffer of the model leaves it as it was).

Nothing runnable outlives the context. The caches that could hand a stand-in to a later
compile of the same graph are kept out of it: inductor's FX graph cache and AOTAutograd's cache
are off inside it, the wrapper modules first loaded inside it are dropped from inductor's
``PyCodeCache`` on exit, and dynamo is reset on exit (as ``run_and_get_code`` resets it on
entry), so the next ``torch.compile`` of the model compiles for real.

Only C++ kernels (the CPU target) are stood in for; a CUDA target compiles its Triton kernels
as usual.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch

__all__ = ["kernels_not_compiled"]


def _stand_in(*args: Any, **kwargs: Any) -> None:
    """A generated kernel that is never compiled: called, it does nothing."""


def _cpp(self: Any, source_code: str) -> Callable[..., None]:
    return _stand_in


def _cpp_pybinding(self: Any, argtypes: list[str], source_code: str) -> Callable[..., None]:
    return _stand_in


@contextlib.contextmanager
def kernels_not_compiled() -> Iterator[None]:
    """Inductor generates its code here but compiles none of its C++ kernels (see module)."""
    import torch._functorch.config as functorch_config
    import torch._inductor.config as inductor_config
    from torch._inductor.async_compile import AsyncCompile
    from torch._inductor.codecache import PyCodeCache

    loaded_before = set(PyCodeCache.modules_no_attr)
    n_modules_before = len(PyCodeCache.modules)
    saved = AsyncCompile.cpp, AsyncCompile.cpp_pybinding
    AsyncCompile.cpp, AsyncCompile.cpp_pybinding = _cpp, _cpp_pybinding  # type: ignore[method-assign]
    try:
        with inductor_config.patch(fx_graph_cache=False, fx_graph_remote_cache=False,
                                   compile_threads=1), \
                functorch_config.patch(enable_autograd_cache=False):
            yield
    finally:
        AsyncCompile.cpp, AsyncCompile.cpp_pybinding = saved  # type: ignore[method-assign]
        for path in set(PyCodeCache.modules_no_attr) - loaded_before:
            del PyCodeCache.modules_no_attr[path]
        del PyCodeCache.modules[n_modules_before:]
        torch._dynamo.reset()
