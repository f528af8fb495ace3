#!/usr/bin/env bash
# Paper figure: opt pairs at fixed target compute (B = 6, 10, 14, 21, 30), then the report.
# SD/SpecTr/SpecInfer/RSD-S run every shape meeting B; RSD-C runs its branching vectors of depth <= 4.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=experiments/gpus.sh
source experiments/gpus.sh
python run.py -m experiment=fig_opt_fixed_compute model_pair=opt_125m_13b,opt_125m_30b,opt_350m_13b,opt_350m_30b "$@"
python run.py -m experiment=fig_opt_fixed_compute model_pair=opt_125m_66b,opt_350m_66b $(two_gpus "$@") "$@"
python run.py -m experiment=fig_opt_fixed_compute drafter=rsd_c budget.max_depth=4 model_pair=opt_125m_13b,opt_125m_30b,opt_350m_13b,opt_350m_30b "$@"
python run.py -m experiment=fig_opt_fixed_compute drafter=rsd_c budget.max_depth=4 model_pair=opt_125m_66b,opt_350m_66b $(two_gpus "$@") "$@"
python -m analysis.report results/paper/opt_fixed_compute --out reports/opt_fixed_compute
