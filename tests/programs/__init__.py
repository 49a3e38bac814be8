"""PyTorch programs in the shapes learners port (minGPT, the Annotated Transformer).

Each file is written for PyTorch; the tests run it twice, as written and with only its import
lines changed to tinyattn (`load`), and compare the two at the same weights.
"""

from __future__ import annotations

import re
import types
from pathlib import Path

PROGRAMS = Path(__file__).parent


def load(name: str, library: str) -> types.ModuleType:
    """The program `name` as written (library 'torch') or with its imports swapped to tinyattn."""
    source = (PROGRAMS / f"{name}.py").read_text()
    if library == "tinyattn":
        source = re.sub(r"^import torch$", "import tinyattn as torch", source, flags=re.M)
        source = re.sub(r"^import torch\.", "import tinyattn.", source, flags=re.M)
        source = re.sub(r"^from torch([. ])", r"from tinyattn\1", source, flags=re.M)
        assert "torch." not in "".join(
            line for line in source.splitlines() if line.startswith(("import", "from"))
        ).replace("as torch", "")
    module = types.ModuleType(f"{name}_{library}")
    exec(compile(source, str(PROGRAMS / f"{name}.py"), "exec"), module.__dict__)
    return module
