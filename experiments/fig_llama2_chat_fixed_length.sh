#!/usr/bin/env bash
# Paper figure: llama2_chat pairs at fixed draft length (L = 2..5), then the report (tables + figures).
# Extra arguments go to every sweep, e.g. hydra/launcher=slurm hydra.launcher.partition=gpu dataset.num_prompts=50
set -euo pipefail
cd "$(dirname "$0")/.."
python run.py -m experiment=fig_llama2_chat_fixed_length "$@"
python -m analysis.report results/paper/llama2_chat_fixed_length --out reports/llama2_chat_fixed_length
