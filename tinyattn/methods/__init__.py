"""The Tensor method families, one file each, joined into ``Tensor`` by tinyattn/tensor.py.

Each family is a mixin class (``ReductionMethods``, ``ShapeMethods`` ...) deriving from
`common.TensorBase`; ``class Tensor(ArithmeticMethods, ReductionMethods, ...)`` in tensor.py
inherits them all, so ``help(Tensor)``, ``dir(x)`` and go-to-definition find every method where
it is written. See docs/reading-the-code.md.
"""
