"""tinyattn: a small, readable reverse-mode autograd framework on NumPy (CPU) or CuPy (GPU).

Layers, each importing only those before it: backend -> autograd -> ops -> tensor -> functional
-> nn -> optim, plus checking (gradcheck) and testing. See docs/architecture.md.
"""

from .autograd import (
    AnomalyError,
    Function,
    detect_anomaly,
    enable_grad,
    grad,
    is_grad_enabled,
    no_grad,
    set_grad_enabled,
)
from .backend import cupy_status, manual_seed
from .tensor import (
    Tensor,
    arange,
    concat,
    from_numpy,
    full,
    maximum,
    ones,
    ones_like,
    rand,
    randn,
    stack,
    tensor,
    where,
    zeros,
    zeros_like,
)

float32 = "float32"
float64 = "float64"
int64 = "int64"
int32 = "int32"
bool_ = "bool"

__version__ = "0.1.0"

__all__ = [
    "AnomalyError",
    "detect_anomaly",
    "Function",
    "Tensor",
    "arange",
    "bool_",
    "concat",
    "cupy_status",
    "enable_grad",
    "float32",
    "float64",
    "from_numpy",
    "full",
    "grad",
    "int32",
    "int64",
    "is_grad_enabled",
    "manual_seed",
    "maximum",
    "no_grad",
    "ones",
    "ones_like",
    "rand",
    "randn",
    "set_grad_enabled",
    "stack",
    "tensor",
    "where",
    "zeros",
    "zeros_like",
]

# The layers above the core load on first use (PEP 562), so `import tinyattn` stays fast:
# `ta.nn`, `from tinyattn import optim`, `ta.gradcheck(...)` and `ta.save(...)` all work as usual.
_LAZY = {
    "functional": ("tinyattn.functional", None),
    "nn": ("tinyattn.nn", None),
    "optim": ("tinyattn.optim", None),
    "viz": ("tinyattn.viz", None),
    "GradcheckError": ("tinyattn.checking", "GradcheckError"),
    "gradcheck": ("tinyattn.checking", "gradcheck"),
    "gradgradcheck": ("tinyattn.checking", "gradgradcheck"),
    "numerical_grad": ("tinyattn.checking", "numerical_grad"),
    "load": ("tinyattn.serialization", "load"),
    "save": ("tinyattn.serialization", "save"),
}
__all__ += [name for name in _LAZY if name != "viz"]


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module 'tinyattn' has no attribute {name!r}")
    import importlib

    module_name, attribute = _LAZY[name]
    module = importlib.import_module(module_name)
    value = module if attribute is None else getattr(module, attribute)
    globals()[name] = value  # cache: the next access is a plain attribute lookup
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
