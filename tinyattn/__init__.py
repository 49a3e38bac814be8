"""tinyattn: a small, readable reverse-mode autograd framework on NumPy (CPU) or CuPy (GPU).

Layers, each importing only those before it: backend -> autograd -> ops -> tensor -> functional
-> nn -> optim, plus the tools on top (checking, testing, serialization, viz, compiler, cuda,
utils.data); `kernels` (the speed tricks) sits on backend beside autograd. See
docs/architecture.md.
"""

import builtins as _builtins

from .autograd import (
    AnomalyError,
    Function,
    detect_anomaly,
    enable_grad,
    grad,
    inference_mode,
    is_grad_enabled,
    no_grad,
    set_grad_enabled,
)
from .backend import cupy_status, get_rng_state, keep_freed_memory, manual_seed, set_rng_state
from .backend.threads import get_num_threads, set_num_threads
from .creation import (
    BoolTensor,
    ByteTensor,
    DoubleTensor,
    FloatTensor,
    IntTensor,
    LongTensor,
    arange,
    as_tensor,
    empty,
    empty_like,
    eye,
    from_numpy,
    full,
    full_like,
    linspace,
    ones,
    ones_like,
    rand,
    rand_like,
    randint,
    randn,
    randn_like,
    randperm,
    tensor,
    zeros,
    zeros_like,
)
from .devices import device
from .methods.common import concat, stack, where
from .methods.statistics import cdist
from .tensor import Tensor
from .tensor_functions import (
    FUNCTIONS,
    cat,
    cosine_similarity,
    einsum,
    equal,
    finfo,
    hstack,
    iinfo,
    is_tensor,
    meshgrid,
    pad,
    vstack,
)

# Dtypes by PyTorch's names (inside this namespace `float`, `int` and `bool` name dtypes, as in
# PyTorch); every dtype argument accepts these names.
float32 = float = "float32"  # noqa: A001
float64 = double = "float64"
float16 = half = "float16"
int64 = long = "int64"
int32 = int = "int32"  # noqa: A001
int16 = short = "int16"
int8 = "int8"
uint8 = "uint8"
# PyTorch's name, so programs that mention it load; a tensor made with it is refused (NumPy and
# CuPy have no bfloat16 arrays) with an error naming the dtype.
bfloat16 = "bfloat16"
bool = bool_ = "bool"  # noqa: A001

# tinyattn.exp(x), tinyattn.sin(x), tinyattn.pow(x, 2), tinyattn.topk(x, k) ...: each is the
# Tensor method of the same name (tinyattn/tensor.py builds them from the op tables).
globals().update(FUNCTIONS)

__version__ = "0.1.0"

__all__ = [
    "AnomalyError",
    "detect_anomaly",
    "Function",
    "Tensor",
    "arange",
    "bool_",
    "cat",
    "concat",
    "cupy_status",
    "enable_grad",
    "float32",
    "float64",
    "from_numpy",
    "full",
    "get_rng_state",
    "grad",
    "int32",
    "int64",
    "is_grad_enabled",
    "keep_freed_memory",
    "manual_seed",
    "no_grad",
    "ones",
    "ones_like",
    "rand",
    "randn",
    "set_grad_enabled",
    "set_rng_state",
    "stack",
    "tensor",
    "where",
    "zeros",
    "zeros_like",
    "eye",
    "full_like",
    "linspace",
    "rand_like",
    "randn_like",
    "randperm",
    "double",
    "einsum",
    "empty",
    "float16",
    "half",
    "int16",
    "int8",
    "equal",
    "is_tensor",
    "long",
    "pad",
    "meshgrid",
    "cosine_similarity",
    "randint",
    "as_tensor",
    "empty_like",
    "hstack",
    "vstack",
    "short",
    "uint8",
    "device",
    "inference_mode",
    "BoolTensor",
    "ByteTensor",
    "DoubleTensor",
    "FloatTensor",
    "IntTensor",
    "LongTensor",
    "finfo",
    "iinfo",
    "bfloat16",
    "cdist",
    "get_num_threads",
    "set_num_threads",
    "get_default_device",
    "set_default_device",
    # `from tinyattn import *` must not replace Python's own max, sum, round, float, ...
    *(name for name in FUNCTIONS if not hasattr(_builtins, name)),
]

# The layers above the core load on first use (PEP 562), so `import tinyattn` stays fast:
# `ta.nn`, `from tinyattn import optim`, `ta.gradcheck(...)` and `ta.save(...)` all work as usual.
_LAZY = {
    "functional": ("tinyattn.functional", None),
    "nn": ("tinyattn.nn", None),
    "optim": ("tinyattn.optim", None),
    "viz": ("tinyattn.viz", None),
    "utils": ("tinyattn.utils", None),
    "cuda": ("tinyattn.cuda", None),
    "amp": ("tinyattn.amp", None),
    "autocast": ("tinyattn.amp", "autocast"),
    "is_autocast_enabled": ("tinyattn.amp", "is_autocast_enabled"),
    "get_autocast_dtype": ("tinyattn.amp", "get_autocast_dtype"),
    "backends": ("tinyattn.backends", None),
    "distributed": ("tinyattn.distributed", None),
    "accelerator": ("tinyattn.accelerator", None),
    "GradcheckError": ("tinyattn.checking", "GradcheckError"),
    "gradcheck": ("tinyattn.checking", "gradcheck"),
    "gradgradcheck": ("tinyattn.checking", "gradgradcheck"),
    "numerical_grad": ("tinyattn.checking", "numerical_grad"),
    "compile": ("tinyattn.compiler", "compile"),
    "CompileError": ("tinyattn.compiler", "CompileError"),
    "load": ("tinyattn.serialization", "load"),
    "save": ("tinyattn.serialization", "save"),
    "serialization": ("tinyattn.serialization", None),
    "onnx": ("tinyattn.onnx", None),
    "sparse": ("tinyattn.sparse", None),
    "sparse_coo_tensor": ("tinyattn.sparse", "sparse_coo_tensor"),
    "spmm": ("tinyattn.sparse", "spmm"),
    "func": ("tinyattn.func", None),
    "vmap": ("tinyattn.func", "vmap"),
}
__all__ += [name for name in _LAZY if name != "viz"]


def set_default_device(device: str | None) -> None:
    """PyTorch's default device for new tensors: tinyattn's is always the CPU, so ``"cpu"`` (or
    None) is accepted and any other device raises NotImplementedError; pass ``device=`` to the
    factory or move with ``.to(device)``."""
    if device is not None and str(device) != "cpu":
        raise NotImplementedError(
            f"set_default_device({device!r}): tinyattn makes new tensors on the CPU unless a "
            "call passes device=; pass device= or move tensors and modules with .to(device)"
        )


def get_default_device() -> str:
    """'cpu': where factories put a tensor made without ``device=``."""
    return "cpu"


def __getattr__(name: str):
    if name not in _LAZY:
        if name.startswith("_"):
            raise AttributeError(f"module 'tinyattn' has no attribute {name!r}", name=name)
        from .methods.missing import missing_attribute

        message = missing_attribute("tinyattn", "torch", name, __dir__())
        raise AttributeError(message, name=name)
    import importlib

    module_name, attribute = _LAZY[name]
    module = importlib.import_module(module_name)
    value = module if attribute is None else getattr(module, attribute)
    globals()[name] = value  # cache: the next access is a plain attribute lookup
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
