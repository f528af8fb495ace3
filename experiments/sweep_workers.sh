# Sourced by the study scripts (not run): `sweep ARGS...` starts RSD_WORKERS (default 2) copies of the caller's
# `worker ARGS...`, staggered so they start on different runs, and waits for all of them. The workers share the
# sweep through the run locks (rsd.harness.files): a run one holds is skipped by the others.
sweep() {
  local pids=()
  for _ in $(seq "${RSD_WORKERS:-2}"); do
    worker "$@" &
    pids+=($!)
    sleep 5
  done
  for pid in "${pids[@]}"; do wait "$pid"; done
}
