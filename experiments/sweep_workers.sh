# Sourced by the study scripts (not run): `sweep ARGS...` starts RSD_WORKERS (default 2) copies of the caller's
# `worker ARGS...`, staggered so they start on different runs, and waits for all of them. The workers share the
# sweep through the run locks (rsd.store): a run one holds is skipped by the others.
workers=${RSD_WORKERS:-2}

sweep() {
  local pids=()
  for _ in $(seq "$workers"); do
    worker "$@" &
    pids+=($!)
    sleep 5
  done
  for pid in "${pids[@]}"; do wait "$pid"; done
}
