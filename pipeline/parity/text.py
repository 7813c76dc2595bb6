"""Parity of the text endpoint: what ``<model>_text`` computes equals each sentence run alone, in process.

The endpoint (pipeline/repository/text_model.py) tokenizes a whole dynamic batch with tokenizer.json and pads it to
its longest row before calling the model. The reference is each sentence alone: the same tokenizer, no padding, the
FP32 ONNX file. They must agree within the fp32 tolerance (``parity.fp32.atol``) on real sentences and on the rows
that break endpoints: an empty string, a row over ``max_length`` (cut, when truncation is on), non-ASCII text, all
in one batch of mixed lengths. A model that does not mask its padding fails here, before anything ships. The report
records the tokenizer's sha256: the repository and a release ship only that very file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from pipeline.core.atomic import file_digest
from pipeline.core.config import TokenizerConfig
from pipeline.core.errors import ParityError
from pipeline.core.tokenizer import load_tokenizer
from pipeline.records.parity import TextParity

EDGE_CASES = {
    "empty": "",
    "over max_length": " ".join(["the quick brown fox jumps over the lazy dog"] * 80),
    "non-ASCII": "Café crème, naïve façade: 東京で会いましょう ✓",
}


def _tokenizer(path: Path, tok: TokenizerConfig) -> Any:  # noqa: ANN401 - tokenizers.Tokenizer
    try:
        return load_tokenizer(path, tok)
    except Exception as e:  # noqa: BLE001 - the library raises a bare Exception for a malformed file
        raise ParityError(f"cannot load the tokenizer {path}: {str(e).splitlines()[0][:200]}", fix="point model.tokenizer.path at the model's tokenizer.json") from None


def _feeds(encodings: list[Any], tok: TokenizerConfig, pad_id: int) -> dict[str, np.ndarray]:
    """The graph's inputs for ``encodings``, padded to the longest (as the endpoint pads a batch)."""
    width = max(len(e.ids) for e in encodings)
    out = {}
    for name, field in tok.inputs.items():
        arr = np.full((len(encodings), width), pad_id if str(field) == "ids" else 0, dtype=np.int64)
        for i, e in enumerate(encodings):
            values = getattr(e, str(field))
            arr[i, : len(values)] = values
        out[name] = arr
    return out


def endpoint_parity(tok: TokenizerConfig, tokenizer: Path, onnx: Path, sentences: list[str], atol: float) -> TextParity:
    """Compare the endpoint's batched computation with each row alone on ``onnx`` (the FP32 file)."""
    import onnxruntime as ort

    t = _tokenizer(tokenizer, tok)
    from tokenizers import Tokenizer

    pad = Tokenizer.from_file(str(tokenizer)).padding
    pad_id = pad["pad_id"] if pad else (t.token_to_id("[PAD]") or 0)
    cases = dict(EDGE_CASES) if tok.truncation else {k: v for k, v in EDGE_CASES.items() if k != "over max_length"}
    rows = [*sentences, *cases.values()]
    sess = ort.InferenceSession(str(onnx), providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    encodings = t.encode_batch(rows)
    alone = [sess.run(names, _feeds([e], tok, pad_id)) for e in encodings]
    together = sess.run(names, _feeds(encodings, tok, pad_id))
    worst = max(float(np.abs(np.asarray(together[k]) - np.concatenate([np.asarray(a[k]) for a in alone])).max()) for k in range(len(names)))
    longest = max(len(e.ids) for e in encodings)
    reason = "" if worst <= atol else f"a padded batch answers up to {worst:.3g} away from each row alone (atol {atol:g}): does the model mask its padding?"
    return TextParity(
        tokenizer_sha256=file_digest(tokenizer)[0],
        passed=worst <= atol,
        max_abs=worst,
        atol=atol,
        rows=len(rows),
        cases=sorted(cases),
        longest_tokens=longest,
        reason=reason,
    )
