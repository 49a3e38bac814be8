"""What a forward pass keeps for backward: the copy-task model, with and without the rule that
an op keeps an input only when a gradient that is needed reads it (`Function.grad_reads`).

    python benchmarks/saved_memory.py [--batch 64]

After one forward of examples/copy_task.py's model, the graph from the loss is walked and the
bytes of every array it holds are added up (each storage once; parameters left out, since they
live on without the graph). "keep every input" is the same forward with the rule switched off
(each op keeps all its inputs, as before the rule). Three cases: every parameter trains; only
the embeddings train (the blocks and the read-out frozen, as in prompt tuning); only the
read-out trains.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "examples"))
sys.path.insert(0, str(ROOT))

import copy_task  # noqa: E402

import tinyattn as ta  # noqa: E402
import tinyattn.nn.functional as F  # noqa: E402
from tinyattn import autograd, backend  # noqa: E402


def graph_bytes(loss: ta.Tensor, parameters: set[int]) -> int:
    """Bytes of the arrays the graph behind `loss` holds, each storage counted once."""
    seen_nodes, roots, total = set(), set(), 0
    stack = [loss.grad_fn]
    while stack:
        fn = stack.pop()
        if fn is None or id(fn) in seen_nodes:
            continue
        seen_nodes.add(id(fn))
        held = list(fn.inputs or ()) + list(getattr(fn, "_saved", None) or ())
        for value in held:
            array = getattr(value, "array", value)
            if id(value) in parameters or not hasattr(array, "nbytes"):
                continue
            root = backend.storage_root(array)
            if root not in roots:
                roots.add(root)
                total += array.nbytes
        stack.extend(t._ctx for t in fn.inputs or () if getattr(t, "_ctx", None) is not None)
    return total


def forward_loss(model, config, inputs, targets) -> ta.Tensor:
    logits = copy_task.copied_half(model, inputs, config.seq_len)
    return F.cross_entropy(logits.reshape(-1, config.vocab), targets.reshape(-1))


def measure(case: str, keep_all: bool, batch: int) -> int:
    config = copy_task.Config(batch=batch)
    model = copy_task.build_model(config)
    trained = {
        "every parameter": lambda name: True,
        "embeddings only": lambda name: name.startswith(("tokens", "positions")),
        "read-out only": lambda name: name.startswith("unembed"),
    }[case]
    for name, p in model.named_parameters():
        p.requires_grad_(trained(name))
    rng = copy_task.stream(config, 0)
    inputs, targets = copy_task.make_batch(batch, config.seq_len, config.vocab, rng)
    original = autograd._values_read

    def keep_every_input(fn):
        kept = fn.inputs
        found = original(fn)
        fn.inputs = kept  # undo the rule: every input stays
        return found

    if keep_all:
        autograd._values_read = keep_every_input
    try:
        loss = forward_loss(model, config, inputs, targets)
    finally:
        autograd._values_read = original
    return graph_bytes(loss, {id(p) for p in model.parameters()})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=64)
    args = parser.parse_args()
    print(f"copy-task model (examples/copy_task.py defaults), batch {args.batch}: bytes the")
    print("graph holds after one forward, parameters excluded")
    print("| what trains | keep every input | keep what a needed gradient reads | saved |")
    print("|---|---|---|---|")
    for case in ("every parameter", "embeddings only", "read-out only"):
        before, after = measure(case, True, args.batch), measure(case, False, args.batch)
        saved = 1 - after / before if before else 0.0
        print(f"| {case} | {before / 1024:.1f} KiB | {after / 1024:.1f} KiB | {saved:.0%} |")


if __name__ == "__main__":
    main()
