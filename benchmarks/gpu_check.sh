#!/usr/bin/env bash
# The GPU check: random-weight Llama-2-7B + 68M Llama and OPT-13B + OPT-125M in bfloat16 (nothing downloaded), AR and
# every method at L = 4, B = 14 and B = 30: target forward time vs tokens verified, token rate, draft / target /
# other ms per step, host syncs per step, the profiled component split; AR and SD L=4 again through compiled
# static-shape forwards (CUDA graphs), their warm-up (compiles) timed apart. Sized for under 8 minutes on one
# H200-class GPU (shapes past each pair's share of a 320 s budget, and static passes past 60 s per pair, are skipped
# and listed). Prints the tables and writes
# gpu_check.json and gpu_check.txt into the output folder.
#
#   benchmarks/gpu_check.sh [--cpu-smoke] [OUT_DIR] [more gpu_paper_shapes.py options]
#
# OUT_DIR defaults to $OUT. --cpu-smoke: the same code on CPU, scaled down /32, a few tokens (seconds).
# WHEELS=DIR: install the wheels in DIR first (--no-index, into a temporary folder on PYTHONPATH), for a machine
# without a transformers in the project's range and without internet. PYTHON: the interpreter (default python3).
set -euo pipefail
cd "$(dirname "$0")/.."

mode=(--prompts 1 --prompt-tokens 128 --max-new-tokens 48 --sync-tokens 8 --time-budget-s 320
      --static compile --static-shapes "ar,sd L=4" --static-budget-s 60)
if [[ "${1:-}" == "--cpu-smoke" ]]; then
    mode=(--scale-down --prompts 1 --prompt-tokens 16 --max-new-tokens 6 --sync-tokens 3
          --static buffers --static-shapes "ar,sd L=4,rsd_s 3x4")
    shift
fi
out="${1:-${OUT:-}}"
if [[ -z "$out" ]]; then
    echo "gpu_check.sh: no output folder: pass one (benchmarks/gpu_check.sh [--cpu-smoke] OUT_DIR) or set OUT" >&2
    exit 2
fi
shift $(( $# > 0 ? 1 : 0 ))
mkdir -p "$out"

python="${PYTHON:-python3}"
export HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
if [[ -n "${WHEELS:-}" ]]; then
    site="$(mktemp -d)"
    "$python" -m pip install -q --no-index --no-deps --no-compile --target "$site" "$WHEELS"/*.whl
    export PYTHONPATH="$site:$PYTHONPATH"
fi

"$python" benchmarks/gpu_paper_shapes.py --shapes check "${mode[@]}" --json "$out/gpu_check.json" "$@" \
    | tee "$out/gpu_check.txt"
