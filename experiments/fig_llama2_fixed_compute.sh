#!/usr/bin/env bash
# Paper figure: llama2 pairs at fixed target compute (B = 6, 10, 14, 21, 30), then the report.
# SD/SpecTr/SpecInfer/RSD-S run every shape meeting B; RSD-C runs its branching vectors of depth <= 4.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=experiments/gpus.sh
source experiments/gpus.sh
python run.py -m experiment=fig_llama2_fixed_compute model_pair=llama2_7b,llama2_13b "$@"
python run.py -m experiment=fig_llama2_fixed_compute model_pair=llama2_70b $(two_gpus "$@") "$@"
python run.py -m experiment=fig_llama2_fixed_compute drafter=rsd_c budget.max_depth=4 model_pair=llama2_7b,llama2_13b "$@"
python run.py -m experiment=fig_llama2_fixed_compute drafter=rsd_c budget.max_depth=4 model_pair=llama2_70b $(two_gpus "$@") "$@"
python -m analysis.report results/paper/llama2_fixed_compute --out reports/llama2_fixed_compute
