# Sourced by the paper scripts. The 66B/70B pairs need ~137-139 GB in float16 (python -m rsd.harness.plan prints it), two
# 80 GB GPUs spread by their model_pair's `device_map: auto`; every other pair fits one. So each script runs those
# pairs in a sweep of their own, and `two_gpus "$@"` prints the override that asks a SLURM launcher for two GPUs
# per job (nothing for a local launcher, which uses the GPUs it sees). The script's own arguments come after it,
# so a user's hydra.launcher.gpus_per_node wins, and the pre-flight judges that value.
two_gpus() {
  local arg
  for arg in "$@"; do
    case $arg in hydra/launcher=*slurm*) echo hydra.launcher.gpus_per_node=2; return ;; esac
  done
}
