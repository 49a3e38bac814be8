"""The Tensor method families, one file each, joined into ``Tensor`` by tinyattn/tensor.py.

Each family is a mixin class (``ReductionMethods``, ``ShapeMethods`` ...) deriving from
`common.TensorBase`; ``class Tensor(ArithmeticMethods, ReductionMethods, ...)`` in tensor.py
inherits them all, so ``help(Tensor)``, ``dir(x)`` and go-to-definition find every method where
it is written. Inside the families a tensor is named `TensorBase` (in annotations and isinstance
checks), the class every Tensor is, since the families sit below tensor.py. See
docs/reading-the-code.md.
"""
