#!/usr/bin/env bash
# CI job "engines", one per GPU family (.github/workflows/engines.yml): this family's engine only.
#   scripts/ci/engine-job.sh <target> <onnx handoff dir> <out handoff dir> [--require-engine]
# Builds engine@<target> from the onnx job's FP16 or INT8 ONNX (pulled, never rebuilt: --single-item), checks it against
# the parity goldens without torch, pushes it, and leaves its dvc.lock entry, parity report and manifest in the
# out dir for the assemble job. --require-engine (the GPU runners) fails when the engine was skipped; without a
# GPU the job pushes a `skipped` manifest, which the assemble job leaves out with the reason.
set -euo pipefail
TARGET=${1:?usage: engine-job.sh <target> <onnx dir> <out dir> [--require-engine]}
IN=${2:?usage: engine-job.sh <target> <onnx dir> <out dir> [--require-engine]}
OUT=${3:?usage: engine-job.sh <target> <onnx dir> <out dir> [--require-engine]}
REQUIRE=${4:-}
cp "$IN/dvc.lock" "$IN/params.yaml" .
dvc pull fp16 int8 parity   # an engine builds from its target's precision: model.fp16.onnx or model.int8.onnx
# --single-item: the probe (this machine's GPU and TensorRT) and the engine, never the model stages upstream,
# whose source records legitimately differ on a GPU runner (another torch build).
dvc repro --single-item probe "engine@${TARGET}"
python -m json.tool "artifacts/engines/${TARGET}/manifest.json" >/dev/null
if [ "$REQUIRE" = "--require-engine" ] && [ ! -f "artifacts/engines/${TARGET}/model.plan" ]; then
  echo "engine@${TARGET} was skipped on its own runner: $(python -c "import json,sys; print(json.load(open(sys.argv[1]))['reason'])" "artifacts/engines/${TARGET}/manifest.json")" >&2
  exit 1
fi
python -m pipeline.stages.parity --params params.yaml --goldens-only \
  --inputs artifacts/parity/inputs.json --reference artifacts/parity/reference.json \
  --engines artifacts/engines --report "artifacts/reports/parity.${TARGET}.json"
dvc push "engine@${TARGET}"
mkdir -p "$OUT/artifacts/engines/${TARGET}" "$OUT/artifacts/reports"
cp dvc.lock "$OUT/"
cp "artifacts/reports/parity.${TARGET}.json" "$OUT/artifacts/reports/"
cp "artifacts/engines/${TARGET}/manifest.json" "$OUT/artifacts/engines/${TARGET}/"
