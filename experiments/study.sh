#!/usr/bin/env bash
# The embedded-pair studies (docs/results/README.md), resumable. RSD_STUDY picks the edition:
#   v3     (default) the second: draft v3 in the dtype `auto` picks (bfloat16 on a CPU with AVX512-BF16), presets
#          study_v3_*, report in docs/results/embedded-v3
#   eagle  the third: the feature head (model_pair=smollm2_eagle) in float32, presets study_eagle_*, every method plus
#          EAGLE-2's dynamic tree, report in docs/results/embedded-eagle
# Stages, in order (RSD_STAGES picks some, e.g. RSD_STAGES="fixed_length report"):
#   fixed_length   L = 2..5, every built-in method + AR + PLD (+ EAGLE-2), T = 1, the three built-in sets, 48 prompts
#   fixed_compute  B = 6..30, depth <= 5, shapes selected on 8 tuning prompts per set (16 new tokens each)
#   temperature    the fixed-length grid at T = 0.6 on the Dolly-style and XSum-style sets
#   control        (eagle only) the v3 draft's fixed-length grid in float32 on the same prompts (the methods that
#                  use a draft), into $out-control: how much of each gap the draft makes
#   shared         (eagle only) the paper's five methods at shared contexts, L = 2..5, T = 1, the three sets, 48 prompts
#                  (experiments/shared_contexts.py; two processes split the lengths), into $out-shared
#   dial           (v3 only: a feature head cannot be mixed) the acceptance dial, a = 0..0.9, at L = 4 and at B = 14
#                  (the tree methods with the shapes fixed_compute selected on the Dolly-style set; SD as L = 14)
#   rates          token rates: the fixed-length grid again on the first RSD_RATES_PROMPTS (default 8, as the
#                  committed v3 pass) prompts of each set, in one process on an otherwise idle machine (its own
#                  out_dir; run it alone, note `uptime`); eagle: at T = 1 and at T = 0 (RSD_RATES_TEMPERATURES
#                  picks and orders them, e.g. "0.0 1.0")
#   archive        the records archives: one per budget directory, byte-identical when its runs did not change
#   report         the edition's page (and its rates/ page), then the archives
# Every sweep is resumable: rerun to continue. RSD_WORKERS processes (default 2, one torch thread each) share each
# sweep through the run locks. Extra arguments go to every sweep. The runs' records ship in $docs/runs/ (and
# rates/runs/): `python -m analysis.archive unpack $docs/runs results/study` restores them, so a rerun decodes only
# what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
study=${RSD_STUDY:-v3}
case "$study" in
  v3) default_stages="fixed_length fixed_compute temperature dial rates report"; rates_temperatures="1.0" ;;
  eagle) default_stages="fixed_length fixed_compute temperature control shared rates report"
         rates_temperatures="1.0 0.0" ;;
  *) echo "unknown study '$study' (RSD_STUDY): use v3 or eagle" >&2; exit 2 ;;
esac
stages=${RSD_STAGES:-$default_stages}
rates_temperatures=${RSD_RATES_TEMPERATURES:-$rates_temperatures}
rates_prompts=${RSD_RATES_PROMPTS:-8}  # the committed v3 token-rate pass: 8 prompts per set
docs=docs/results/embedded-$study
out=results/study/embedded-$study
echo "[study $study] stages: $stages; RSD_WORKERS=${RSD_WORKERS:-2}; RSD_RATES_PROMPTS=$rates_prompts;" \
  "RSD_RATES_TEMPERATURES=$rates_temperatures; extra arguments: ${*:-none}"

worker() { python run.py -m "$@"; }

source experiments/sweep_workers.sh

# The shape fixed_compute selected for each tree method at B = 14 on the Dolly-style set, as `method shape` lines.
selected_at_b14() {
  python - "$out" <<'PY'
import json, sys
from pathlib import Path
for path in sorted(Path(sys.argv[1]).glob("smollm2/dolly_builtin/T1-*/B14/*/summary.json")):
    s = json.loads(path.read_text())
    if s.get("complete") and (s.get("selection") or {}).get("role") == "eval" and s["config"]["model_pair"].get("mix") is None:
        shape = ",".join(f"{k}:[{','.join(map(str, v))}]" if isinstance(v, list) else f"{k}:{v}"
                         for k, v in s["shape"].items())
        print(s["method"], "{" + shape + "}")
PY
}

pack_records() {
  python -m analysis.archive pack "$out" "$docs/runs"
  [ ! -d "$out-rates" ] || python -m analysis.archive pack "$out-rates" "$docs/rates/runs"
  [ ! -d "$out-control" ] || python -m analysis.archive pack "$out-control" "$docs/control/runs"
  [ ! -d "$out-shared" ] || python -m analysis.shared pack "$out-shared" "$docs/shared"
}

for stage in $stages; do
  case "$stage" in
    fixed_length)
      for dataset in dolly_builtin xsum_builtin wmt_builtin; do
        sweep experiment="study_${study}_fixed_length" dataset="$dataset" "$@"
      done ;;
    fixed_compute)
      for dataset in dolly_builtin xsum_builtin wmt_builtin; do
        sweep experiment="study_${study}_fixed_compute" dataset="$dataset" "$@"
      done ;;
    temperature)
      for dataset in dolly_builtin xsum_builtin; do
        sweep experiment="study_${study}_fixed_length" dataset="$dataset" sampling.temperature=0.6 "$@"
      done ;;
    control)
      [ "$study" = eagle ] || { echo "the control stage is the third study's (RSD_STUDY=eagle)" >&2; exit 2; }
      for dataset in dolly_builtin xsum_builtin wmt_builtin; do
        sweep experiment=study_v3_fixed_length model_pair.dtype=float32 dataset="$dataset" out_dir="$out-control" \
          drafter=sd,bv,specinfer,spectr,rsd_c,tv,rsd_s "$@"  # AR and PLD use no draft: the main grid has them
      done ;;
    shared)
      [ "$study" = eagle ] || { echo "the shared stage is the third study's (RSD_STUDY=eagle)" >&2; exit 2; }
      for dataset in dolly_builtin xsum_builtin wmt_builtin; do
        python experiments/shared_contexts.py --dataset "$dataset" --lengths 2 3 --out "$out-shared" &
        python experiments/shared_contexts.py --dataset "$dataset" --lengths 4 5 --out "$out-shared"
        wait
      done ;;
    dial)
      [ "$study" = v3 ] || { echo "the dial stage is v3's (a feature head cannot be mixed with the target)" >&2; exit 2; }
      sweep experiment=study_v3_dial "$@"
      selected=$(selected_at_b14 | grep -E '^(specinfer|spectr|rsd_c|rsd_s) ' || true)
      [ -n "$selected" ] || { echo "dial at B = 14: run the fixed_compute stage first (no selected shapes)" >&2; exit 1; }
      sweep experiment=study_v3_dial budget=fixed_compute budget.target_tokens=14 drafter=sd "$@"  # the chain L = 14
      while read -r method shape; do
        sweep experiment=study_v3_dial budget=fixed_compute budget.target_tokens=14 drafter="$method" \
          "budget.shape=$shape" "$@"
      done <<< "$selected" ;;
    rates)
      uptime
      for temperature in $rates_temperatures; do
        for dataset in dolly_builtin xsum_builtin wmt_builtin; do
          RSD_WORKERS=1 sweep experiment="study_${study}_fixed_length" dataset="$dataset" \
            sampling.temperature="$temperature" dataset.num_prompts="$rates_prompts" out_dir="$out-rates" "$@"
        done
      done
      uptime ;;
    archive)
      pack_records ;;
    report)
      if [ "$study" = eagle ]; then  # the third edition's page is generated whole (analysis/edition.py)
        extra=()
        [ ! -d "$out-control" ] || extra+=(--control "$out-control")
        [ ! -d "$out-shared" ] || extra+=(--shared "$out-shared")
        [ ! -d "$out-rates" ] || extra+=(--rates "$out-rates")
        python -m analysis.edition "$out" --out "$docs" "${extra[@]}"  # with its rates/ and control/ reports
      else
        python -m analysis.report "$out" --out "$docs" --compact
        [ ! -d "$out-rates" ] || python -m analysis.report "$out-rates" --out "$docs/rates" --compact
      fi
      pack_records ;;
    *) echo "unknown stage '$stage' (RSD_STAGES): use fixed_length, fixed_compute, temperature, control, shared, dial," \
         "rates, archive, report" >&2
       exit 2 ;;
  esac
done
