"""The GPU code generator of fusion: a `fusion.Group` as CUDA source for CuPy (text only).

Imports nothing of tinyattn's; reads the same group descriptions as `codegen_cpu`. A pointwise
group becomes the three strings of a ``cupy.ElementwiseKernel`` (its parameters, the per-element
statements, a name): CuPy then does the broadcasting and the indexing. A rows group becomes the
source of a ``cupy.RawKernel`` with one thread per row, every buffer walked through element
strides given as arguments (as the CPU kernel's views walk them). Nothing here launches a kernel.
"""

from __future__ import annotations

import hashlib
from typing import Any

_TYPES = {"float32": "float", "float64": "double", "bool": "bool", "int64": "long long"}
_TYPES.update(int32="int", uint8="unsigned char", int8="signed char")

# One CUDA expression per elementwise op; {0}, {1}, {2} are the operands. max and min let NaN
# through, as NumPy's maximum and minimum do (fmaxf would drop it).
EXPRESSIONS = {
    "add": "{0} + {1}",
    "sub": "{0} - {1}",
    "mul": "{0} * {1}",
    "div": "{0} / {1}",
    "maximum": "({0} > {1} || {0} != {0}) ? {0} : {1}",
    "minimum": "({0} < {1} || {0} != {0}) ? {0} : {1}",
    "neg": "-{0}",
    "exp": "exp({0})",
    "log": "log({0})",
    "tanh": "tanh({0})",
    "sqrt": "sqrt({0})",
    "relu": "({0} > {zero} || {0} != {0}) ? {0} : {zero}",
    "where": "{0} ? {1} : {2}",
    "add_scalar": "{0} + {c}",
    "mul_scalar": "{0} * {c}",
    "div_scalar": "{0} / {c}",
    "rsub_scalar": "{c} - {0}",
}


def kernel_name(group: Any) -> str:
    """A name that differs between groups of different items: fused_<op>_..._<hash>."""
    ops = "_".join(item.op for item in group.items)[:60]
    digest = hashlib.sha256(repr([str(i) for i in group.items]).encode()).hexdigest()[:8]
    return f"fused_{ops}_{digest}"


def _constant(dtype: str, value: Any) -> str:
    return f"(({_TYPES[dtype]}){float(value)!r})"


def _statements(group: Any, items: list) -> list[str]:
    """One declaration per item's value, in the group's dtype."""
    dtype, lines = group.dtype, []
    ctype = _TYPES[dtype]
    for item in items:
        if item.op == "gelu":
            lines += _gelu(item, ctype, dtype)
            continue
        constants = {"zero": _constant(dtype, 0.0)}
        if item.op.endswith("_scalar"):
            constants["c"] = _constant(dtype, item.param("c"))
        operands = [
            name
            if group.dtype_of(name) == dtype or (item.op == "where" and k == 0)
            else f"(({ctype}){name})"
            for k, name in enumerate(item.inputs)
        ]
        expression = EXPRESSIONS[item.op].format(*operands, **constants)
        lines.append(f"{ctype} {item.outputs[0]} = {expression};")
    return lines


def _gelu(item: Any, ctype: str, dtype: str) -> list[str]:
    """x * Phi(x), Phi by CUDA's own normcdf."""
    (x,), (y, cdf) = item.inputs, item.outputs
    normcdf = "normcdff" if ctype == "float" else "normcdf"
    return [f"{ctype} {cdf} = {normcdf}({x});", f"{ctype} {y} = {x} * {cdf};"]


def elementwise_kernel(group: Any) -> tuple[str, str, str, str]:
    """(in_params, out_params, operation, name) of a pointwise group's ElementwiseKernel: the
    inputs in, the stored outputs out, every item a line."""
    ins = [f"{b.dtype} {b.name}" for b in group.inputs]
    stored = [b for b in group.outputs if b.stored]
    outs = [f"{b.dtype} {b.name}" for b in stored]
    loads = [f"{_TYPES[b.dtype]} {b.value} = {b.name};" for b in group.inputs]
    stores = [f"{b.name} = {b.value};" for b in stored]
    operation = "\n".join(loads + _statements(group, group.items) + stores)
    return ", ".join(ins), ", ".join(outs), operation, kernel_name(group)


def raw_kernel(group: Any) -> str:
    """The CUDA source of a rows group: thread r takes row r, finds each buffer's offset from
    its element strides (arguments `<name>_s<k>`, one per loop), runs the prologue along the
    row, then the row-wise item."""
    loops = len(group.loops)
    buffers = [*group.inputs, *(b for b in group.outputs if b.stored)]
    params = []
    for b in buffers:
        const = "const " if b in group.inputs else ""
        params.append(f"{const}{_TYPES[b.dtype]}* {b.name}")
        params += [f"long long {b.name}_s{k}" for k in range(loops)]
    params += [f"long long n{k}" for k in range(loops)]
    name = kernel_name(group)
    lines = [f'extern "C" __global__ void {name}({", ".join(params)}) {{']
    lines.append("    long long r = (long long)blockIdx.x * blockDim.x + threadIdx.x;")
    lead = " * ".join(f"n{k}" for k in range(loops - 1)) or "1"
    lines.append(f"    if (r >= {lead}) return;")
    lines.append("    long long rest = r;")
    for k in reversed(range(loops - 1)):
        lines.append(f"    long long i{k} = rest % n{k}; rest /= n{k};")
    for b in buffers:
        offset = " + ".join(f"i{k} * {b.name}_s{k}" for k in range(loops - 1)) or "0"
        lines.append(f"    long long {b.name}_row = {offset};")
    *prologue, last = group.items
    n, j = f"n{loops - 1}", f"j * {{}}_s{loops - 1}"
    at = {  # each buffer's element at (row, j); a per-row value's at its row
        b.name: f"{b.name}[{b.name}_row]"
        if b.per_row
        else f"{b.name}[{b.name}_row + {j.format(b.name)}]"
        for b in buffers
    }
    if prologue:
        lines.append(f"    for (long long j = 0; j < {n}; j++) {{")
        loads = [f"{_TYPES[b.dtype]} {b.value} = {at[b.name]};" for b in group.inputs]
        made = {v for item in prologue for v in item.outputs}
        stores = [f"{at[b.name]} = {b.value};" for b in buffers if b.value in made]
        lines += ["        " + s for s in loads + _statements(group, prologue) + stores]
        lines.append("    }")
    lines += ["    " + s for s in _row_item(group, last, at, n)]
    return "\n".join(lines + ["}"]) + "\n"


def _row_item(group: Any, item: Any, at: dict, n: str) -> list[str]:
    """The row-wise item's passes along the row (the CPU kernel's, one thread per row)."""
    ctype = _TYPES[group.dtype]
    value = {b.value: at[b.name] for b in (*group.inputs, *group.outputs) if b.name in at}
    x = value[item.inputs[0]]
    if item.op in ("softmax", "log_softmax"):
        y = value[item.outputs[0]]
        lines = [
            f"{ctype} m = -INFINITY;",
            f"for (long long j = 0; j < {n}; j++) {{ {ctype} v = {x}; "
            "if (v > m || v != v) m = v; }",
            "if (m == -INFINITY) m = 0;",
            "double total = 0;",
            f"for (long long j = 0; j < {n}; j++) total += exp({x} - m);",
            "if (total == 0) total = 1;",
        ]
        if item.op == "softmax":
            update = f"{y} = exp({x} - m) / ({ctype})total;"
        else:
            update = f"{y} = ({x} - m) - log(({ctype})total);"
        return lines + [f"for (long long j = 0; j < {n}; j++) {update}"]
    if item.op == "cross_entropy":
        return _cross_entropy(group, item, value, n, ctype)
    weight, *bias = (value[v] for v in item.inputs[1:])
    y, x_hat = value[item.outputs[0]], value[item.outputs[1]]
    rstd = value[item.outputs[2]]
    affine = f"h * {weight}" + (f" + {bias[0]}" if bias else "")
    eps = _constant(group.dtype, item.param("eps"))
    return [
        "double total = 0;",
        f"for (long long j = 0; j < {n}; j++) total += {x};",
        f"{ctype} mean = ({ctype})(total / {n});",
        "double squares = 0;",
        f"for (long long j = 0; j < {n}; j++) {{ {ctype} d = {x} - mean; squares += d * d; }}",
        f"{ctype} rs = 1 / sqrt(({ctype})(squares / {n}) + {eps});",
        f"{rstd} = rs;",
        f"for (long long j = 0; j < {n}; j++) {{",
        f"    {ctype} h = ({x} - mean) * rs;",
        f"    {x_hat} = h;",
        f"    {y} = {affine};",
        "}",
    ]


def _cross_entropy(group: Any, item: Any, value: dict, n: str, ctype: str) -> list[str]:
    """The row's log-probabilities, target row and loss (the CPU kernel's steps); the loss and
    the count of kept targets are added to the first elements of the loss and count buffers
    (zeroed before the launch; the mean's division is left to the caller)."""
    x, target = value[item.inputs[0]], value[item.inputs[1]]
    loss, log_probs, weights, *count = (value[v] for v in item.outputs)
    ignore, smoothing = item.param("ignore_index"), item.param("smoothing")
    classes = item.param("classes")
    hit = _constant(group.dtype, 1.0 - smoothing)
    share = f" + {_constant(group.dtype, smoothing / classes)}" if smoothing else ""
    kept = "true" if ignore is None else f"t != {ignore}"
    lines = [
        f"{ctype} m = -INFINITY;",
        f"for (long long j = 0; j < {n}; j++) {{ if ({x} > m) m = {x}; }}",
        "if (m == -INFINITY) m = 0;",
        "double total = 0;",
        f"for (long long j = 0; j < {n}; j++) total += exp({x} - m);",
        f"{ctype} log_total = log(({ctype})(total == 0 ? 1 : total));",
        f"long long t = {target}; bool kept = {kept};",
        "double row_loss = 0;",
        f"for (long long j = 0; j < {n}; j++) {{",
        f"    {ctype} lp = ({x} - m) - log_total;",
        f"    {log_probs} = lp;",
        f"    {ctype} w = kept ? ({ctype})(j == t) * {hit}{share} : 0;",
        f"    {weights} = w;",
        "    if (w != 0) row_loss -= w * lp;",
        "}",
        f"atomicAdd(&{loss}, ({ctype})row_loss);",
    ]
    return lines + ([f"if (kept) atomicAdd(&{count[0]}, ({ctype})1);"] if count else [])


def source(group: Any) -> str:
    """The group's GPU source as text: the ElementwiseKernel call, or the RawKernel's CUDA."""
    if group.kind == "pointwise":
        ins, outs, operation, name = elementwise_kernel(group)
        body = "\n".join(f"    {line}" for line in operation.splitlines())
        return (
            f'cupy.ElementwiseKernel(\n    "{ins}",\n    "{outs}",\n    """\n{body}\n    """,\n'
            f'    "{name}",\n)\n'
        )
    return raw_kernel(group)
