"""Per-sample gradients of an MLP: ``vmap(grad(loss), in_dims=(None, 0, 0))`` against a Python
loop over the samples, in tinyattn and in PyTorch (``torch.func``), side by side.

Run: ``env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/per_sample_grads.py``
(``--batch 64 --repeats 7``). Prints the machine, the BLAS and, per variant, the median time of a
call with the range over the repeats, and checks that the four give the same gradients.
"""

from __future__ import annotations

import argparse
import os

import numpy as np
from common import machine_report, timed_range  # benchmarks/common.py, beside this script

import tinyattn as ta
import tinyattn.nn.functional as F
from tinyattn.func import functional_call, grad, vmap

SIZES = (784, 128, 128, 10)  # an MNIST-sized MLP: in, two hidden layers, classes


def _model(module, rng: np.random.Generator) -> tuple:
    layers = []
    for n_in, n_out in zip(SIZES[:-1], SIZES[1:]):
        layers += [module.Linear(n_in, n_out), module.ReLU()]
    return module.Sequential(*layers[:-1])


def tinyattn_variants(batch: int, rng: np.random.Generator) -> tuple:
    model = _model(ta.nn, rng)
    params = {k: v.detach() for k, v in model.named_parameters()}
    x = ta.tensor(rng.standard_normal((batch, SIZES[0])).astype(np.float32))
    y = ta.tensor(rng.integers(0, SIZES[-1], batch))

    def loss(p, sample, target):
        logits = functional_call(model, p, (sample.unsqueeze(0),))
        return F.cross_entropy(logits, target.unsqueeze(0))

    def batched():
        return vmap(grad(loss), in_dims=(None, 0, 0))(params, x, y)

    def loop():
        per = [grad(loss)(params, x[i], y[i]) for i in range(batch)]
        return {k: ta.stack([g[k] for g in per]) for k in params}

    return batched, loop, (model, x, y)


def torch_variants(batch: int, model_state: tuple) -> tuple:
    import torch

    model, x, y = model_state
    net = _model(torch.nn, None)
    net.load_state_dict(
        {k: torch.tensor(v.detach().numpy()) for k, v in model.state_dict().items()}
    )
    params = {k: v.detach() for k, v in net.named_parameters()}
    tx, ty = torch.tensor(x.numpy()), torch.tensor(y.numpy())

    def loss(p, sample, target):
        logits = torch.func.functional_call(net, p, (sample.unsqueeze(0),))
        return torch.nn.functional.cross_entropy(logits, target.unsqueeze(0))

    def batched():
        return torch.func.vmap(torch.func.grad(loss), in_dims=(None, 0, 0))(params, tx, ty)

    def loop():
        per = [torch.func.grad(loss)(params, tx[i], ty[i]) for i in range(batch)]
        return {k: torch.stack([g[k] for g in per]) for k in params}

    return batched, loop


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    print("\n".join(machine_report()))
    print(f"load average {os.getloadavg()[0]:.1f} before the run")
    print(f"MLP {SIZES}, batch {args.batch}, float32; median (min-max) of {args.repeats} calls")
    batched, loop, state = tinyattn_variants(args.batch, rng)
    rows = [("tinyattn vmap(grad)", batched), ("tinyattn loop of grad", loop)]
    try:
        torch_batched, torch_loop = torch_variants(args.batch, state)
        rows += [("torch.func vmap(grad)", torch_batched), ("torch loop of grad", torch_loop)]
    except ImportError:
        print("(PyTorch is not installed: its rows are left out)")
    results = {}
    for name, call in rows:
        median, low, high = timed_range(call, args.repeats)
        results[name] = (median, call())
        print(f"  {name:24s} {median * 1e3:8.2f} ms  ({low * 1e3:.2f}-{high * 1e3:.2f})")
    ours = results["tinyattn loop of grad"][0] / results["tinyattn vmap(grad)"][0]
    print(f"tinyattn: vmap is {ours:.1f}x faster than the loop")
    reference = {k: v.detach().numpy() for k, v in results["tinyattn loop of grad"][1].items()}
    for name, (_, grads) in results.items():
        worst = max(
            float(np.abs(np.asarray(grads[k].detach().numpy()) - reference[k]).max())
            for k in reference
        )
        print(f"  {name:24s} largest difference from the tinyattn loop: {worst:.1e}")


if __name__ == "__main__":
    main()
