#!/usr/bin/env bash
# The first study on the embedded pair (docs/results/embedded-v1/README.md): the paper's fixed-length grid on the
# three built-in datasets at T = 1, the same grid at T = 0 on Dolly-style prompts, and the fixed-compute grid with
# shapes selected on tuning prompts; then the report into docs/results/embedded-v1. Every sweep is resumable: rerun
# to continue. RSD_WORKERS processes (default 2, one torch thread each) share each sweep: a run held by one is skipped
# by the others (rsd.harness.files's run locks). Extra arguments go to every sweep. The finished runs' records ship in
# docs/results/embedded-v1/runs.tar.gz: `tar xzf docs/results/embedded-v1/runs.tar.gz -C results/study` restores
# them, so a rerun resumes where they stop instead of decoding them again.
set -euo pipefail
cd "$(dirname "$0")/.."

# The first study ran with draft v1 in float32 under the pair name smollm2: these overrides give its run
# directories exactly (the default pair now has draft v3).
worker() { python run.py -m model_pair=smollm2_v1 model_pair.name=smollm2 "$@"; }

source experiments/sweep_workers.sh

for dataset in dolly_builtin xsum_builtin wmt_builtin; do
  sweep experiment=fig_smollm2_fixed_length dataset="$dataset" "$@"
done
sweep experiment=fig_smollm2_fixed_length dataset=dolly_builtin sampling.temperature=0 "$@"
for dataset in dolly_builtin xsum_builtin wmt_builtin; do
  sweep experiment=fig_smollm2_fixed_compute dataset="$dataset" "$@"
done
python -m analysis.report results/study/embedded --out docs/results/embedded-v1 --compact
tar czf docs/results/embedded-v1/runs.tar.gz --exclude='*.lock' --exclude='.hydra' -C results/study embedded
