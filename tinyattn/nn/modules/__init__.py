"""PyTorch's ``torch.nn.modules`` package: ``nn.modules.linear.Linear``, ``nn.modules.rnn.LSTM``,
``nn.modules.activation.MultiheadAttention``, ... are the classes of ``tinyattn.nn`` under the
paths PyTorch programs use (a list of globals for ``safe_globals``, an ``isinstance`` check).

Each submodule re-exports classes defined elsewhere in ``tinyattn.nn`` and defines none, so a
class has one identity under every name. Loaded on first use of ``nn.modules``, never by
``import tinyattn``. Imports only ``tinyattn.nn``'s own modules.
"""

from . import (  # noqa: F401  (the submodules, PyTorch's paths)
    activation,
    batchnorm,
    container,
    conv,
    dropout,
    flatten,
    fold,
    instancenorm,
    linear,
    loss,
    module,
    normalization,
    pixelshuffle,
    pooling,
    rnn,
    sparse,
    transformer,
    upsampling,
)
from .activation import *  # noqa: F403
from .batchnorm import *  # noqa: F403
from .container import *  # noqa: F403
from .conv import *  # noqa: F403
from .dropout import *  # noqa: F403
from .flatten import *  # noqa: F403
from .fold import *  # noqa: F403
from .instancenorm import *  # noqa: F403
from .linear import *  # noqa: F403
from .loss import *  # noqa: F403
from .module import *  # noqa: F403
from .normalization import *  # noqa: F403
from .pixelshuffle import *  # noqa: F403
from .pooling import *  # noqa: F403
from .rnn import *  # noqa: F403
from .sparse import *  # noqa: F403
from .transformer import *  # noqa: F403
from .upsampling import *  # noqa: F403

SUBMODULES = (
    activation,
    batchnorm,
    container,
    conv,
    dropout,
    flatten,
    fold,
    instancenorm,
    linear,
    loss,
    module,
    normalization,
    pixelshuffle,
    pooling,
    rnn,
    sparse,
    transformer,
    upsampling,
)
__all__ = [name for submodule in SUBMODULES for name in submodule.__all__]
