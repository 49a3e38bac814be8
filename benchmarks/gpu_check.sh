#!/usr/bin/env bash
# The GPU check in one command, without network: benchmarks/gpu_check.py does the work.
#
#   benchmarks/gpu_check.sh OUTDIR [WHEELDIR] [-- DRIVER OPTIONS]
#   benchmarks/gpu_check.sh --rehearse OUTDIR [-- DRIVER OPTIONS]
#
# 1. Checks which of the project's runtime and test dependencies are importable and installs
#    only the missing ones, from WHEELDIR (see gpu_wheels.sh) with `pip install --no-index`,
#    into a temporary folder put on PYTHONPATH: the machine's environment is left as it is.
# 2. Installs the project from this working tree (`pip install --no-deps --no-build-isolation
#    --no-index -e`); where that fails, runs from the tree all the same (it is on PYTHONPATH
#    either way). --rehearse skips this step and runs in the current environment.
# 3. Runs the driver under an overall limit of 460 s (each part has its own); with the two
#    installs' 20 s limits, the whole stays under 9 minutes.
# Writes OUTDIR/report.md, the raw OUTDIR/*.json and the logs. PYTHON picks the interpreter.
set -u

ROOT=$(cd "$(dirname "$0")/.." && pwd)
PYTHON=${PYTHON:-python3}
REHEARSE=""
if [ "${1:-}" = "--rehearse" ]; then
    REHEARSE=--rehearse
    shift
fi
OUT=${1:?usage: gpu_check.sh [--rehearse] OUTDIR [WHEELDIR] [-- DRIVER OPTIONS]}
shift
WHEELS=""
if [ $# -gt 0 ] && [ "$1" != "--" ]; then
    WHEELS=$1
    shift
fi
[ "${1:-}" = "--" ] && shift
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
: >"$OUT/install.log"
for tool in timeout "$PYTHON"; do
    command -v "$tool" >/dev/null || { echo "gpu_check.sh: $tool not found" >&2; exit 2; }
done

# Import name -> distribution name: the runtime and test dependencies and theirs.
MISSING=$("$PYTHON" - <<'EOF'
import importlib.util
import sys

needed = {
    "numpy": "numpy", "array_api_compat": "array-api-compat", "safetensors": "safetensors",
    "pytest": "pytest", "iniconfig": "iniconfig", "pluggy": "pluggy", "packaging": "packaging",
    "pygments": "pygments", "hypothesis": "hypothesis", "sortedcontainers": "sortedcontainers",
    "array_api_strict": "array-api-strict",
}
if sys.version_info < (3, 11):  # pytest's and hypothesis's, and exceptiongroup's
    needed |= {"exceptiongroup": "exceptiongroup", "tomli": "tomli"}
    needed |= {"typing_extensions": "typing-extensions"}
print(" ".join(d for m, d in needed.items() if importlib.util.find_spec(m) is None))
EOF
)
STATUS="missing before install: ${MISSING:-none}"
if [ -n "$MISSING" ]; then
    if [ -n "$WHEELS" ]; then
        DEPS=$(mktemp -d)
        trap 'rm -rf "$DEPS"' EXIT
        # shellcheck disable=SC2086  # one word per distribution
        if timeout 20 "$PYTHON" -m pip install --no-index --no-deps --find-links "$WHEELS" \
            --target "$DEPS" $MISSING >>"$OUT/install.log" 2>&1; then
            export PYTHONPATH="$DEPS${PYTHONPATH:+:$PYTHONPATH}"
            STATUS="$STATUS; installed from $WHEELS"
        else
            STATUS="$STATUS; installing them from $WHEELS failed (install.log)"
        fi
    else
        STATUS="$STATUS; no wheel folder given"
    fi
fi
if [ -z "$REHEARSE" ]; then
    if timeout 20 "$PYTHON" -m pip install --no-deps --no-build-isolation --no-index -e "$ROOT" \
        >>"$OUT/install.log" 2>&1; then
        STATUS="$STATUS; project: editable install"
    else
        STATUS="$STATUS; project: editable install failed (install.log), run from the tree"
    fi
else
    STATUS="$STATUS; project: run from the tree (rehearsal, nothing installed)"
fi
echo "$STATUS" | tee "$OUT/install.status"
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
# shellcheck disable=SC2086  # empty unless rehearsing
timeout -k 5 460 "$PYTHON" "$ROOT/benchmarks/gpu_check.py" $REHEARSE "$OUT" "$@"
code=$?
[ $code -eq 124 ] && echo "gpu_check.sh: stopped by the overall limit; $OUT/report.md has the parts that finished" >&2
exit $code
