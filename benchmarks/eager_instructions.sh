#!/usr/bin/env bash
# The eager path's cost in CPU instructions, counted by Valgrind: a measure the machine's load
# cannot move, and closer to time than eager_opcodes.py's bytecodes (it counts what each
# bytecode costs, the array library's C code and the memory allocator too).
#
#   benchmarks/eager_instructions.sh [TREE ...]      # default: this checkout
#
# Run by hand, never as a test; needs valgrind (callgrind) on PATH. PYTHON picks the
# interpreter. For each TREE (a checkout whose `tinyattn` package is imported, so that two
# versions compare side by side) it runs bench.py's per-op chain (y = y * 1.0001 + 0.0001, 50
# times, on a (4,) float32 tensor, then y.sum().backward()) 10 and 110 times under callgrind and
# prints the difference per elementwise op, forward and backward: start-up and imports cancel
# out. One BLAS thread, so that no idle thread's spinning is counted. About 80 s per tree.
set -eu

PYTHON=${PYTHON:-python3}
command -v valgrind >/dev/null || { echo "eager_instructions.sh: valgrind not found" >&2; exit 2; }
ROOT=$(cd "$(dirname "$0")/.." && pwd)
[ $# -eq 0 ] && set -- "$ROOT"
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
cat >"$WORK/chain.py" <<'EOF'
import sys

import numpy as np

import tinyattn as ta

x = ta.tensor(np.ones(4, np.float32), requires_grad=True)
for _ in range(int(sys.argv[1])):
    y = x
    for _ in range(50):
        y = y * 1.0001 + 0.0001
    y.sum().backward()
    x.grad = None
EOF

count() {  # TREE CHAINS -> instructions of the whole run
    OPENBLAS_NUM_THREADS=1 PYTHONPATH=$1 valgrind --tool=callgrind \
        --callgrind-out-file="$WORK/out.$2" "$PYTHON" "$WORK/chain.py" "$2" >/dev/null 2>&1
    callgrind_annotate "$WORK/out.$2" 2>/dev/null | awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1}'
}

echo "| tree | instructions per elementwise op, forward + backward |"
echo "|---|---|"
for tree in "$@"; do
    tree=$(cd "$tree" && pwd)
    few=$(count "$tree" 10)
    many=$(count "$tree" 110)
    echo "| $tree | $(( (many - few) / (100 * 100) )) |"
done
