#!/usr/bin/env bash
# Paper figure: opt pairs at fixed draft length (L = 2..5), then the report (tables + figures).
# Extra arguments go to every sweep, e.g. hydra/launcher=slurm hydra.launcher.partition=gpu dataset.num_prompts=50
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=experiments/gpus.sh
source experiments/gpus.sh
python run.py -m experiment=fig_opt_fixed_length model_pair=opt_125m_13b,opt_125m_30b,opt_350m_13b,opt_350m_30b "$@"
python run.py -m experiment=fig_opt_fixed_length model_pair=opt_125m_66b,opt_350m_66b $(two_gpus "$@") "$@"
python -m analysis.report results/paper/opt_fixed_length --out reports/opt_fixed_length
