#!/usr/bin/env bash
# CI job "assemble" (.github/workflows/engines.yml): one repository from the onnx job and every GPU job that reported.
#   scripts/ci/assemble-job.sh <onnx handoff dir> <dir holding one gpu-<target>/ handoff dir per engine job>
# Merges the engine jobs' dvc.lock entries and parity results, pulls exactly those engines, writes the repository
# (only engines built on the right GPU from this ONNX that passed parity) and prints the targets table.
set -euo pipefail
IN=${1:?usage: assemble-job.sh <onnx dir> <gpu jobs dir>}
JOBS=${2:?usage: assemble-job.sh <onnx dir> <gpu jobs dir>}
cp "$IN/dvc.lock" "$IN/params.yaml" .
mkdir -p artifacts/sources && cp "$IN"/sources/*.json artifacts/sources/   # what the onnx job's probe recorded
dvc pull export simplify fp16 calibrate int8 parity choose tune
locks=(); reports=(); present=()
for d in "$JOBS"/gpu-*; do
  t="${d##*/gpu-}"
  [ -f "$d/artifacts/engines/$t/manifest.json" ] || continue
  present+=("engine@$t")
  locks+=("$t=$d/dvc.lock")
  [ -f "$d/artifacts/reports/parity.$t.json" ] && reports+=("$t=$d/artifacts/reports/parity.$t.json")
done
if [ "${#locks[@]}" -gt 0 ]; then
  python -m pipeline.engines.ci merge-locks --into dvc.lock "${locks[@]}"
  dvc pull "${present[@]}"
fi
if [ "${#reports[@]}" -gt 0 ]; then
  python -m pipeline.engines.ci merge-parity --into artifacts/reports/parity.json "${reports[@]}"
fi
# --single-item: this CPU runner must not rerun the engine stages (its probe differs and would skip them).
dvc repro --single-item repository
python -m pipeline.engines.ci table --params params.yaml --engines artifacts/engines
