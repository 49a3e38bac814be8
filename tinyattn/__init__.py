"""tinyattn: a small, readable reverse-mode autograd framework on NumPy (CPU) or CuPy (GPU).

Layers, each importing only those before it: backend -> autograd -> ops -> tensor -> functional
-> nn -> optim, plus gradcheck. See docs/architecture.md.
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

from .gradcheck import GradcheckError, gradcheck, gradgradcheck, numerical_grad  # noqa: E402

__all__ += ["GradcheckError", "gradcheck", "gradgradcheck", "numerical_grad"]

from . import functional, nn, optim  # noqa: E402  (the layers above the core, in import order)
from .serialization import load, save  # noqa: E402

__all__ += ["functional", "load", "nn", "optim", "save"]
