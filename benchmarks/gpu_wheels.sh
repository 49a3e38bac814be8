#!/usr/bin/env bash
# Downloads, on a machine with network, the wheels gpu_check.sh may need on a GPU machine
# without one: the project's runtime and test dependencies (and theirs), for Linux x86-64.
#
#   benchmarks/gpu_wheels.sh [DIR] [PYTHON_VERSION ...]
#
# DIR defaults to benchmarks/wheels: untracked but not ignored, so it travels with a copy of
# the working tree (never commit it); then `gpu_check.sh OUTDIR benchmarks/wheels`. Pure-Python
# wheels and safetensors' one wheel for every CPython >= 3.10 are always fetched (about 3 MB);
# NumPy, which a CuPy machine has already, only for each PYTHON_VERSION given (e.g. 3.12),
# about 16 MB each. PYTHON picks the pip.
set -eu

ROOT=$(cd "$(dirname "$0")/.." && pwd)
DIR=${1:-$ROOT/benchmarks/wheels}
[ $# -gt 0 ] && shift
PYTHON=${PYTHON:-python3}
mkdir -p "$DIR"

# The pins are pyproject.toml's; --no-deps with the dependencies listed, so that nothing
# pulls in NumPy for a Python version it was not asked for.
PURE=(
    "array-api-compat>=1.16" "array-api-strict>=2.6" "pytest>=8" iniconfig pluggy packaging
    pygments "hypothesis>=6.100" sortedcontainers exceptiongroup tomli typing-extensions
)
# py3-none-any only: some of these also ship compiled wheels for one CPython each.
"$PYTHON" -m pip download --no-deps --only-binary=:all: --dest "$DIR" --platform any \
    --implementation py --abi none --python-version 3.10 "${PURE[@]}"
PLATFORM=(--platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64
          --platform manylinux_2_28_x86_64 --implementation cp)
"$PYTHON" -m pip download --no-deps --only-binary=:all: --dest "$DIR" "${PLATFORM[@]}" \
    --python-version 3.10 "safetensors>=0.4"
for version in "$@"; do
    "$PYTHON" -m pip download --no-deps --only-binary=:all: --dest "$DIR" "${PLATFORM[@]}" \
        --python-version "$version" "numpy>=2.0,<3"
done
ls -l "$DIR"
