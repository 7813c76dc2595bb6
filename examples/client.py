"""Embed sentences with the MiniLM text endpoint served by Triton, and compare them.

    python examples/client.py --url localhost:8000 "A man is playing a guitar." "Someone plays the guitar."

Sends the sentences as text (``text``, BYTES, one sentence per row) to ``minilm_text``, the endpoint the repository
ships beside the tensor model: Triton tokenizes them with the model's own tokenizer and returns ``embedding``
([batch, 384], L2-normalised). Prints its shape and the cosine similarity of every pair of sentences; ``--json``
prints the same as one JSON object (with the embeddings), for scripts.

Needs only: ``pip install 'tritonclient[http]' numpy``. To call the tensor endpoint (``minilm``, token ids in)
instead, tokenize first: docs/serving.md shows how. The sentences are sent in chunks of the served config's
``max_batch_size``, the most one request may carry.
"""

from __future__ import annotations

import argparse
import json
import sys
from itertools import combinations

import numpy as np
import tritonclient.http as httpclient


def embed(client: httpclient.InferenceServerClient, model: str, sentences: list[str]) -> np.ndarray:
    """One inference: the ``embedding`` output for a batch of sentences."""
    rows = np.array([[s.encode("utf-8")] for s in sentences], dtype=object)
    text = httpclient.InferInput("text", list(rows.shape), "BYTES")
    text.set_data_from_numpy(rows)
    result = client.infer(model, [text], outputs=[httpclient.InferRequestedOutput("embedding")])
    return result.as_numpy("embedding")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("sentences", nargs="+", help="sentences to embed")
    p.add_argument("--url", default="localhost:8000", help="Triton's HTTP endpoint, host:port (default: %(default)s)")
    p.add_argument("--model", default="minilm_text", help="the text endpoint's name in the repository (default: %(default)s)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    args = p.parse_args(argv)

    client = httpclient.InferenceServerClient(args.url)
    # A model served with max_batch_size 0 takes any batch; otherwise a request may carry at most that many rows.
    chunk = client.get_model_config(args.model).get("max_batch_size") or len(args.sentences)
    parts = [args.sentences[i : i + chunk] for i in range(0, len(args.sentences), chunk)]
    emb = np.concatenate([embed(client, args.model, part) for part in parts])

    norms = np.linalg.norm(emb, axis=1)
    cosine = (emb @ emb.T) / np.outer(norms, norms)
    if args.json:
        print(json.dumps({"shape": list(emb.shape), "norms": norms.tolist(), "cosine": cosine.tolist(), "embeddings": emb.tolist()}))
        return 0
    print(f"embedding: shape {tuple(emb.shape)}, {emb.dtype}, L2 norms {', '.join(f'{n:.4f}' for n in norms)}")
    for i, j in combinations(range(len(args.sentences)), 2):
        print(f"cosine {cosine[i, j]:+.3f}  {args.sentences[i]!r} vs {args.sentences[j]!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
