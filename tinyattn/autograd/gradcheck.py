"""PyTorch's ``torch.autograd.gradcheck`` module: `gradcheck` and `gradgradcheck` with its
signatures, over tinyattn's checker (`tinyattn.checking`).

The checker is a tool listed after `autograd` (it imports `autograd`'s engine and forward mode,
and makes its probes through the Tensors it is given), so this module, a door at PyTorch's path
inside `autograd`, imports it when called, never at import time. PyTorch's keywords that have no
counterpart here (``nondet_tol``, ``check_undefined_grad``, ``masked`` ...) are accepted and
ignored where their default is what tinyattn does; ``fast_mode`` is the checker's ``fast``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def gradcheck(
    func: Callable,
    inputs: Any,
    *,
    eps: float = 1e-6,
    atol: float = 1e-5,
    rtol: float = 1e-3,
    raise_exception: bool = True,
    nondet_tol: float = 0.0,
    check_undefined_grad: bool = True,
    check_grad_dtypes: bool = False,
    check_batched_grad: bool = False,
    check_batched_forward_grad: bool = False,
    check_forward_ad: bool = False,
    check_backward_ad: bool = True,
    fast_mode: bool = False,
    masked: bool | None = None,
) -> bool:
    """Check ``func(*inputs)``'s derivatives with respect to the inputs that require grad
    against central differences: backward rules (``check_backward_ad``), jvp rules
    (``check_forward_ad``, also against backward by ``<J v, u> == <v, J^T u>``), linearity in
    the cotangent (``check_batched_grad``). True, or GradcheckError (False without
    ``raise_exception``)."""
    from .. import checking

    def run() -> bool:
        return checking.gradcheck(
            func,
            inputs,
            eps=eps,
            atol=atol,
            rtol=rtol,
            fast=fast_mode,
            check_forward_ad=check_forward_ad or check_batched_forward_grad,
            check_backward_ad=check_backward_ad,
            check_batched_grad=check_batched_grad,
        )

    return _raising_or_not(run, raise_exception, checking.GradcheckError)


def gradgradcheck(
    func: Callable,
    inputs: Any,
    grad_outputs: Any = None,
    *,
    eps: float = 1e-6,
    atol: float = 1e-5,
    rtol: float = 1e-3,
    gen_non_contig_grad_outputs: bool = False,
    raise_exception: bool = True,
    nondet_tol: float = 0.0,
    check_undefined_grad: bool = True,
    check_grad_dtypes: bool = False,
    check_batched_grad: bool = False,
    check_fwd_over_rev: bool = False,
    check_rev_over_rev: bool = True,
    fast_mode: bool = False,
    masked: bool = False,
) -> bool:
    """Check second derivatives: the derivatives of ``x -> grad(<v, func(x)>, x)`` (v a seeded
    random cotangent; `grad_outputs` is not supported) by reverse mode (``check_rev_over_rev``)
    and by forward mode over it (``check_fwd_over_rev``)."""
    from .. import checking

    if grad_outputs is not None:
        raise NotImplementedError(
            "gradgradcheck: grad_outputs is not supported; the checker draws a seeded random "
            "cotangent instead"
        )

    def run() -> bool:
        return checking.gradgradcheck(
            func,
            inputs,
            eps=eps,
            atol=atol,
            rtol=rtol,
            fast=fast_mode,
            check_forward_ad=check_fwd_over_rev,
            check_backward_ad=check_rev_over_rev,
            check_batched_grad=check_batched_grad,
        )

    return _raising_or_not(run, raise_exception, checking.GradcheckError)


def _raising_or_not(run: Callable[[], bool], raise_exception: bool, error: type) -> bool:
    if raise_exception:
        return run()
    try:
        return run()
    except error:
        return False


__all__ = ["gradcheck", "gradgradcheck"]
