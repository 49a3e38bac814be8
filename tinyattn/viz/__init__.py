"""Looking inside the graph: ``tinyattn.viz``.

`graph.py` draws the graph that produced a tensor (``to_dot``, ``render``, ``trace``,
``summary``); `backward.py` steps through the engine's own backward pass on a page
(``animate_backward``). A tool above all the layers: it imports `backend`, `autograd` and
`tensor` only.
"""

from .backward import SEED, BackwardAnimation, LeafGradient, Sent, Step, animate_backward
from .graph import FORMATS, SMALL, Trace, render, summary, to_dot, trace

__all__ = [
    "FORMATS",
    "SEED",
    "SMALL",
    "BackwardAnimation",
    "LeafGradient",
    "Sent",
    "Step",
    "Trace",
    "animate_backward",
    "render",
    "summary",
    "to_dot",
    "trace",
]
