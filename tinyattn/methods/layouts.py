"""Tensor methods, layouts family: dense tensors meeting PyTorch's sparse COO layout.

``is_sparse`` (False for every Tensor), ``to_sparse()`` (a `tinyattn.sparse.SparseTensor`) and
``to_dense()`` (the tensor itself, as PyTorch returns a dense tensor). The sparse layout lives in
tinyattn/sparse/layout.py, which, like this module, imports only modules below the tensor layer.
``to_sparse`` imports it when called rather than here: importing it first runs its package's
__init__.py (the public constructors, which import tinyattn.tensor, still loading when this
module is), and ``import tinyattn`` loads the sparse package only on first use.
"""

from __future__ import annotations

from typing import Any

from .common import TensorBase


def _refused_layout(name: str) -> Any:
    """A method for a sparse layout tinyattn lacks: it raises an error naming it."""

    def refused(self: Any, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(
            f"{name}: tinyattn has only the sparse COO layout; use to_sparse()"
        )

    refused.__name__ = refused.__qualname__ = name
    return refused


class LayoutMethods(TensorBase):
    """Conversions between the dense (strided) layout and sparse COO."""

    __slots__ = ()  # every tensor's slots are declared once, in Tensor

    @property
    def is_sparse(self) -> bool:
        """False: a Tensor is dense; sparse COO tensors are `tinyattn.sparse.SparseTensor`."""
        return False

    def to_dense(self) -> TensorBase:
        """The tensor itself (already dense), as PyTorch's ``to_dense`` of a strided tensor."""
        return self

    def to_sparse(self, sparse_dim: int | None = None, *, layout: Any = None) -> Any:
        """The nonzero elements as a coalesced sparse COO tensor (the first `sparse_dim` dims
        sparse, all by default); the gradient of its values reaches this tensor. Other layouts
        (CSR, CSC, blocks) are refused by name. Shapes: (N, M) -> sparse (N, M)."""
        if layout not in (None, "sparse_coo"):
            raise NotImplementedError(
                f"to_sparse(layout={layout!r}): tinyattn has only the sparse COO layout; use "
                "to_sparse() (or keep the tensor dense)"
            )
        from ..sparse.layout import from_dense  # noqa: PLC0415  (see the module docstring)

        return from_dense(self, sparse_dim)

    to_sparse_csr = _refused_layout("to_sparse_csr")
    to_sparse_csc = _refused_layout("to_sparse_csc")
    to_sparse_bsr = _refused_layout("to_sparse_bsr")
    to_sparse_bsc = _refused_layout("to_sparse_bsc")

    def to_sparse_coo(self) -> Any:
        """PyTorch's explicit spelling of ``to_sparse()``."""
        return self.to_sparse()
