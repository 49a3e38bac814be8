"""Optim layer: L-BFGS, PyTorch's quasi-Newton optimizer (after minFunc), with its strong-Wolfe
line search.

Imports `backend`, `autograd`, `tensor` and the optimizer helpers beside it. Like PyTorch's it
works on one flat vector holding every parameter, re-evaluates the loss through the closure that
``step`` takes, and keeps its history (the last `history_size` pairs of steps s and gradient
changes y) in the state of the first parameter. The scalars PyTorch keeps as 0-d tensors (y.s,
H_diag, the line search's slopes) are 0-d arrays of the parameters' dtype here, so a float32 run
rounds as PyTorch's does.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from .. import backend
from ..autograd import enable_grad
from ..errors import TinyattnError
from ..tensor import Tensor
from .flat import write_param
from .optimizer import _plain, _snapshot
from .options import LoopOptimizer, check_range


def _cubic_interpolate(x1, f1, g1, x2, f2, g2, bounds=None):  # noqa: ANN001, ANN202
    """The minimiser of the cubic through (x1, f1) and (x2, f2) with slopes g1 and g2, kept in
    `bounds` (default: between x1 and x2); the bounds' midpoint where the cubic has none."""
    low, high = bounds if bounds is not None else ((x1, x2) if x1 <= x2 else (x2, x1))
    d1 = g1 + g2 - 3 * (f1 - f2) / (x1 - x2)
    d2_square = d1**2 - g1 * g2
    if d2_square >= 0:
        d2 = d2_square**0.5
        if x1 <= x2:
            min_pos = x2 - (x2 - x1) * ((g2 + d2 - d1) / (g2 - g1 + 2 * d2))
        else:
            min_pos = x1 - (x1 - x2) * ((g1 + d2 - d1) / (g1 - g2 + 2 * d2))
        return min(max(min_pos, low), high)
    return (low + high) / 2.0


def _dot(a: Any, b: Any) -> Any:
    return backend.namespace(a).vecdot(a, b)


def _kept_inside(t: float, bracket: list, insufficient: bool) -> tuple[float, bool]:
    """The zoom's next step `t`, moved to 10% inside the bracket when it is too close to an end,
    unless the last try was already too close (then accepted once, which lets the bracket
    shrink); returns the step and whether this one was too close."""
    eps = 0.1 * (max(bracket) - min(bracket))
    if min(max(bracket) - t, t - min(bracket)) >= eps:
        return t, False
    if not (insufficient or t >= max(bracket) or t <= min(bracket)):
        return t, True
    if abs(t - max(bracket)) < abs(t - min(bracket)):
        return max(bracket) - eps, False
    return min(bracket) + eps, False


def _strong_wolfe(evaluate, t, d, f, g, gtd, c1=1e-4, c2=0.9, tolerance_change=1e-9, max_ls=25):  # noqa: ANN001, ANN201, PLR0913
    """PyTorch's line search along d from the point with loss f, gradient g and slope gtd: find
    a step t with sufficient decrease (f(t) <= f + c1 t gtd) and a flat enough slope
    (|g(t).d| <= -c2 gtd). First bracket such a t, growing t by cubic extrapolation; then zoom
    into the bracket by cubic interpolation. Returns (loss, gradient, t, evaluations)."""
    xp = backend.namespace(d)
    d_norm = xp.max(xp.abs(d))
    f_new, g_new = evaluate(t)
    evaluations, gtd_new = 1, _dot(g_new, d)
    t_prev, f_prev, g_prev, gtd_prev = 0, f, g, gtd
    done, ls_iter = False, 0
    while ls_iter < max_ls:
        if f_new > (f + c1 * t * gtd) or (ls_iter > 1 and f_new >= f_prev):
            bracket, bracket_f = [t_prev, t], [f_prev, f_new]
            bracket_g, bracket_gtd = [g_prev, g_new], [gtd_prev, gtd_new]
            break
        if abs(gtd_new) <= -c2 * gtd:
            bracket, bracket_f, bracket_g, done = [t], [f_new], [g_new], True
            break
        if gtd_new >= 0:
            bracket, bracket_f = [t_prev, t], [f_prev, f_new]
            bracket_g, bracket_gtd = [g_prev, g_new], [gtd_prev, gtd_new]
            break
        # Extrapolate: the cubic's minimum, between 1.01 t and 10 t.
        min_step, max_step = t + 0.01 * (t - t_prev), t * 10
        previous = t
        t = _cubic_interpolate(t_prev, f_prev, gtd_prev, t, f_new, gtd_new, (min_step, max_step))
        t_prev, f_prev, g_prev, gtd_prev = previous, f_new, g_new, gtd_new
        f_new, g_new = evaluate(t)
        evaluations, gtd_new, ls_iter = evaluations + 1, _dot(g_new, d), ls_iter + 1
    if ls_iter == max_ls:
        bracket, bracket_f, bracket_g = [0, t], [f, f_new], [g, g_new]
    insufficient = False
    low, high = (0, 1) if bracket_f[0] <= bracket_f[-1] else (1, 0)
    while not done and ls_iter < max_ls:
        if abs(bracket[1] - bracket[0]) * d_norm < tolerance_change:
            break
        t = _cubic_interpolate(
            bracket[0], bracket_f[0], bracket_gtd[0], bracket[1], bracket_f[1], bracket_gtd[1]
        )
        t, insufficient = _kept_inside(t, bracket, insufficient)
        f_new, g_new = evaluate(t)
        evaluations, gtd_new, ls_iter = evaluations + 1, _dot(g_new, d), ls_iter + 1
        if f_new > (f + c1 * t * gtd) or f_new >= bracket_f[low]:
            bracket[high], bracket_f[high], bracket_g[high] = t, f_new, g_new
            bracket_gtd[high] = gtd_new
            low, high = (0, 1) if bracket_f[0] <= bracket_f[1] else (1, 0)
        else:
            if abs(gtd_new) <= -c2 * gtd:
                done = True
            elif gtd_new * (bracket[high] - bracket[low]) >= 0:
                bracket[high], bracket_f[high] = bracket[low], bracket_f[low]
                bracket_g[high], bracket_gtd[high] = bracket_g[low], bracket_gtd[low]
            bracket[low], bracket_f[low], bracket_g[low] = t, f_new, g_new
            bracket_gtd[low] = gtd_new
    return bracket_f[low], bracket_g[low], bracket[low], evaluations


class LBFGS(LoopOptimizer):
    """L-BFGS, PyTorch's algorithm: each ``step(closure)`` runs up to max_iter iterations of
    d = -H g, where H g is the two-loop recursion over the stored pairs (s_i, y_i) with
    rho_i = 1 / (y_i . s_i) and initial scale H_diag = y.s / y.y of the newest pair;
    p = p + t d with t = lr (the first iteration: min(1, 1 / |g|_1) lr), or t from the strong
    Wolfe line search (``line_search_fn="strong_wolfe"``). A pair is stored only where
    y.s > 1e-10 (curvature positive). It stops at max_iter iterations or max_eval evaluations,
    when max |g| <= tolerance_grad, or when the step or the loss changes by less than
    tolerance_change. One parameter group only, as in PyTorch.
    """

    state_keys = ("func_evals", "n_iter", "d", "t", "old_dirs", "old_stps", "ro", "H_diag")
    state_keys += ("prev_flat_grad", "prev_loss", "al")

    def __init__(
        self,
        params: Iterable[Any],
        lr: float = 1,
        max_iter: int = 20,
        max_eval: int | None = None,
        tolerance_grad: float = 1e-7,
        tolerance_change: float = 1e-9,
        history_size: int = 100,
        line_search_fn: str | None = None,
    ) -> None:
        if max_eval is None:
            max_eval = max_iter * 5 // 4
        defaults = dict(
            lr=lr,
            max_iter=max_iter,
            max_eval=max_eval,
            tolerance_grad=tolerance_grad,
            tolerance_change=tolerance_change,
            history_size=history_size,
            line_search_fn=line_search_fn,
        )
        super().__init__(params, defaults)
        if len(self.param_groups) != 1:
            raise TinyattnError("LBFGS doesn't support per-parameter options (parameter groups)")
        self._params = self.param_groups[0]["params"]

    def _validate(self, group: dict[str, Any]) -> None:
        check_range(self.name, "lr", group["lr"], 0.0)
        if group["line_search_fn"] not in (None, "strong_wolfe"):
            raise TinyattnError(
                f"LBFGS: line_search_fn must be None or 'strong_wolfe', got "
                f"{group['line_search_fn']!r}"
            )

    def add_param_group(self, group: dict[str, Any]) -> None:
        if self.param_groups:
            raise TinyattnError("LBFGS doesn't support per-parameter options (parameter groups)")
        super().add_param_group(group)

    # -------------------------------------------------------------------- the flat vector
    def _flat_grad(self) -> Any:
        """Every gradient laid end to end (zeros for a parameter without one)."""
        parts = []
        for p in self._params:
            xp = backend.namespace(p.array)
            grad = xp.zeros_like(p.array) if p.grad is None else p.grad.array
            parts.append(xp.reshape(grad, (-1,)))
        return backend.namespace(parts[0]).concat(parts)

    def _add_grad(self, step_size: Any, update: Any) -> None:
        """p = p + step_size * (p's slice of update), for every parameter, in place."""
        offset = 0
        for p in self._params:
            xp, count = backend.namespace(p.array), p.numel()
            piece = xp.reshape(update[offset : offset + count], p.shape)
            write_param(p, p.array + step_size * piece, self.name)
            offset += count

    def _evaluate(self, closure: Callable[[], Any], x: list[Any], t: Any, d: Any) -> Any:
        """The loss and flat gradient at x + t d; the parameters are put back to x."""
        self._add_grad(t, d)
        with enable_grad():
            loss = float(closure())
        flat_grad = self._flat_grad()
        for p, values in zip(self._params, x, strict=True):
            write_param(p, values, self.name)
        return loss, flat_grad

    # ------------------------------------------------------------------------------ step
    def step(self, closure: Callable[[], Any]) -> Any:  # type: ignore[override]
        """Run up to max_iter iterations; `closure` must zero the gradients, compute the loss,
        call backward and return the loss. Returns the first evaluation's loss."""
        if closure is None:
            raise TinyattnError("LBFGS.step needs a closure that recomputes the loss")
        group = self.param_groups[0]
        state = self.state.setdefault(self._params[0], {})
        state.setdefault("func_evals", 0)
        state.setdefault("n_iter", 0)
        with enable_grad():
            original_loss = closure()
        loss, evaluations = float(original_loss), 1
        state["func_evals"] += 1
        flat_grad = self._flat_grad()
        xp = backend.namespace(flat_grad)
        if xp.max(xp.abs(flat_grad)) <= group["tolerance_grad"]:
            return original_loss  # already optimal
        self._iterate(closure, group, state, loss, flat_grad, evaluations)
        return original_loss

    def _direction(self, state: dict, flat_grad: Any, group: dict) -> Any:
        """Store the newest pair (s, y) and return d = -H g by the two-loop recursion."""
        if state["n_iter"] == 1:
            state.update(old_dirs=[], old_stps=[], ro=[], H_diag=1)
            return -flat_grad
        y = flat_grad - state["prev_flat_grad"]
        s = state["d"] * state["t"]
        ys = _dot(y, s)
        if ys > 1e-10:  # keep only pairs of positive curvature (H stays positive definite)
            if len(state["old_dirs"]) == group["history_size"]:
                for key in ("old_dirs", "old_stps", "ro"):
                    state[key].pop(0)
            state["old_dirs"].append(y)
            state["old_stps"].append(s)
            state["ro"].append(1.0 / ys)
            state["H_diag"] = ys / _dot(y, y)
        old_dirs, old_stps, ro = state["old_dirs"], state["old_stps"], state["ro"]
        al = state.setdefault("al", [None] * group["history_size"])
        q = -flat_grad
        for i in range(len(old_dirs) - 1, -1, -1):
            al[i] = _dot(old_stps[i], q) * ro[i]
            q = q + (-al[i]) * old_dirs[i]
        r = q * state["H_diag"]
        for i in range(len(old_dirs)):
            be_i = _dot(old_dirs[i], r) * ro[i]
            r = r + (al[i] - be_i) * old_stps[i]
        return r

    def _iterate(self, closure, group, state, loss, flat_grad, evaluations) -> None:  # noqa: ANN001
        xp = backend.namespace(flat_grad)
        lr, tolerance_change = group["lr"], group["tolerance_change"]
        n_iter = 0
        while n_iter < group["max_iter"]:
            n_iter += 1
            state["n_iter"] += 1
            d = state["d"] = self._direction(state, flat_grad, group)
            state["prev_flat_grad"], state["prev_loss"] = flat_grad, loss
            if state["n_iter"] == 1:
                t = min(1.0, 1.0 / xp.sum(xp.abs(flat_grad))) * lr
            else:
                t = lr
            gtd = _dot(flat_grad, d)
            if gtd > -tolerance_change:  # not a descent direction
                state["t"] = t
                break
            if group["line_search_fn"] is not None:
                x = [xp.asarray(p.array, copy=True) for p in self._params]

                def evaluate(step: Any, x: list[Any] = x, d: Any = d) -> Any:
                    return self._evaluate(closure, x, step, d)

                budget = group["max_eval"] - evaluations
                loss, flat_grad, t, spent = _strong_wolfe(
                    evaluate, t, d, loss, flat_grad, gtd, max_ls=budget
                )
                self._add_grad(t, d)
                optimal = xp.max(xp.abs(flat_grad)) <= group["tolerance_grad"]
            else:
                self._add_grad(t, d)
                spent, optimal = 0, False
                if n_iter != group["max_iter"]:
                    with enable_grad():
                        loss = float(closure())
                    flat_grad = self._flat_grad()
                    optimal = xp.max(xp.abs(flat_grad)) <= group["tolerance_grad"]
                    spent = 1
            state["t"] = t
            evaluations += spent
            state["func_evals"] += spent
            if n_iter == group["max_iter"] or evaluations >= group["max_eval"] or optimal:
                break
            if xp.max(xp.abs(d * t)) <= tolerance_change:
                break
            if abs(loss - state["prev_loss"]) < tolerance_change:
                break

    # ------------------------------------------------------------------------- state dict
    def state_dict(self) -> dict[str, Any]:
        """PyTorch's layout: the history under parameter 0, lists of Tensors as lists."""
        saved = super().state_dict()
        for entries in saved["state"].values():
            for key, value in entries.items():
                if isinstance(value, list):
                    entries[key] = [None if v is None else _snapshot(v) for v in value]
        return saved

    def _converted_state(self, op: str, saved: dict) -> dict[Tensor, dict[str, Any]]:
        """Tensors (alone or in lists) back to arrays of the parameters' dtype; numbers stay."""
        first = self._params[0]

        def array(value: Any) -> Any:
            if isinstance(value, Tensor) or hasattr(value, "shape"):
                return Tensor(value, dtype=backend.dtype_name(first.dtype)).array
            return value

        converted: dict[Tensor, dict[str, Any]] = {}
        for raw_index, entries in saved.items():
            if int(raw_index) != 0 or set(entries) - set(self.state_keys):
                raise TinyattnError(f"{op}: LBFGS keeps its state under parameter 0 only")
            state = {}
            for key, value in entries.items():
                if key in ("func_evals", "n_iter"):
                    state[key] = int(_plain(value))
                elif isinstance(value, list | tuple):
                    state[key] = [None if v is None else array(v) for v in value]
                else:
                    state[key] = array(value)
            converted[first] = state
        return converted


__all__ = ["LBFGS"]
