"""PyTorch's ``torch.onnx`` name, so ``import tinyattn.onnx`` works in a ported program.

A tool on top of the layers; imports only `errors`. tinyattn has no ONNX exporter: it records no
graph that an ONNX file could be written from ahead of time, and it does not depend on the
``onnx`` package. `export` raises an error that says so and how to move the weights instead.
"""

from __future__ import annotations

from typing import Any

from .errors import TinyattnError


class OnnxExportError(TinyattnError):
    """tinyattn cannot write ONNX files (a RuntimeError, the type PyTorch's exporter raises)."""


def export(model: Any, args: Any = (), f: Any = None, *unused: Any, **options: Any) -> None:
    """Refuse: tinyattn has no ONNX export (PyTorch's ``torch.onnx.export``).

    Move the weights to PyTorch instead: ``ta.save(model.state_dict(), "model.safetensors")``,
    then in PyTorch ``model.load_state_dict(safetensors.torch.load_file("model.safetensors"))``
    on the same module tree (the state dict keys and layouts are PyTorch's), and export there.
    """
    raise OnnxExportError(
        f"onnx.export: tinyattn has no ONNX export (asked to export a {type(model).__name__}). "
        "Move the weights to PyTorch and export there: "
        "ta.save(model.state_dict(), 'model.safetensors'), then in PyTorch "
        "model.load_state_dict(safetensors.torch.load_file('model.safetensors')) and "
        "torch.onnx.export(model, ...)"
    )


def is_in_onnx_export() -> bool:
    """False: tinyattn never runs a model inside an ONNX export (PyTorch's name)."""
    return False


__all__ = ["OnnxExportError", "export", "is_in_onnx_export"]
