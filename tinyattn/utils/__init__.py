"""tinyattn.utils: PyTorch's ``torch.utils`` counterpart; ``utils.data`` holds Dataset and
DataLoader. Imports `backend` and `tensor` only."""

from . import data

__all__ = ["data"]
