#!/usr/bin/env bash
# One-step setup for a fresh machine: a venv in .venv with everything the pipeline and its tests need.
# Idempotent: rerunning only installs what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
# torch==2.13.0 (pinned in pyproject) is the CPU build these machines carry; an unpinned torch pulls a CUDA build.
.venv/bin/python -m pip install -q -e '.[dev]'
# nvidia-pytriton ships a real tritonserver binary and python-backend stubs. Its declared deps
# (protobuf<6, numpy<2 pins) clash with onnx's protobuf>=6, and we use only the binary: --no-deps.
.venv/bin/python -m pip install -q --no-deps 'nvidia-pytriton==0.7.0'
.venv/bin/python -c "import pipeline, onnx, onnxruntime, onnxsim, polygraphy, tritonclient.grpc.model_config_pb2" \
  && echo "setup ok: $(.venv/bin/python --version), activate with: . .venv/bin/activate"
