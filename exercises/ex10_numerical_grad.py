"""Exercise 10: central-difference numerical gradients (what gradcheck compares against).

The math: for a scalar function f of an array x, perturb one element at a time:

    df/dx_i ~ (f(x + eps e_i) - f(x - eps e_i)) / (2 eps)

(e_i: 1 at element i, 0 elsewhere). Taylor's theorem gives the error: the one-sided
(f(x + eps e_i) - f(x)) / eps is off by about eps/2 * f'', the central difference only by about
eps^2/6 * f''', because the even terms cancel. That is why gradcheck uses central differences.

Hint: loop over ``range(x.size)`` on a float64 copy, ``flat = x_copy.reshape(-1)`` (a view), set
``flat[i]`` to the perturbed value, call f, and put the old value back. Do not change `x`.

Grade it: ``python -m pytest exercises -k ex10``.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np


def central_difference(
    f: Callable[[np.ndarray], float], x: np.ndarray, eps: float = 1e-6
) -> np.ndarray:
    """df/dx by central differences, an array of x's shape (float64); `x` is left unchanged."""
    raise NotImplementedError("exercise 10: write this rule (see the hint above)")
