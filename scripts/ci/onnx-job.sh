#!/usr/bin/env bash
# CI job "onnx" (.github/workflows/engines.yml): the FP16 and INT8 ONNX, the parity goldens, the precision
# choice and the tune of the throughput variant (its record only, unless tune.enabled), once for every GPU job.
#   scripts/ci/onnx-job.sh <fleet, e.g. [cpu,a100,h100]> <handoff dir>
# Pushes the model stages to the DVC remote and leaves dvc.lock, params.yaml and the source records in the handoff dir, so every
# engine job builds from the same ONNX. Run from the repository root with the venv active.
set -euo pipefail
FLEET=${1:?usage: onnx-job.sh <fleet> <handoff dir>}
OUT=${2:?usage: onnx-job.sh <fleet> <handoff dir>}
python -m pipeline.params "targets=${FLEET}"
dvc repro fp16 int8
dvc repro --single-item parity
dvc repro --single-item choose
dvc repro --single-item tune
dvc push export simplify fp16 calibrate int8 parity choose tune
mkdir -p "$OUT/sources"
cp dvc.lock params.yaml "$OUT/"
# The probe's source records (cache: false, so not in the remote): the repository stage depends on the data
# hook's, and the assemble job must see the records this lock was written against.
cp artifacts/sources/*.json "$OUT/sources/"
