#!/usr/bin/env bash
# Paper figure: llama2_chat pairs at fixed draft length (L = 2..5), then the report (tables + figures).
# Extra arguments go to every sweep, e.g. hydra/launcher=slurm hydra.launcher.partition=gpu dataset.num_prompts=50
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=experiments/gpus.sh
source experiments/gpus.sh
python run.py -m experiment=fig_llama2_chat_fixed_length model_pair=llama2_chat_7b,llama2_chat_13b "$@"
python run.py -m experiment=fig_llama2_chat_fixed_length model_pair=llama2_chat_70b $(two_gpus "$@") "$@"
python -m analysis.report results/paper/llama2_chat_fixed_length --out reports/llama2_chat_fixed_length
