"""A user's own model, as the README's worked example: a factory, a checkpoint, input specs in YAML.

python -m examples.custom_model examples/custom_model.safetensors   # "train" and save weights
python -m pipeline.params model=example_custom && dvc repro
"""

from __future__ import annotations

import sys

import torch
from torch import nn


class TabularClassifier(nn.Module):
    """A small MLP over tabular features, with a softmax head (two outputs: logits and probs)."""

    def __init__(self, features: int = 12, hidden: int = 64, classes: int = 3) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(features, hidden), nn.LayerNorm(hidden), nn.GELU(), nn.Linear(hidden, classes))

    def forward(self, features: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        logits = self.body(features)
        return logits, logits.softmax(dim=-1)


def build(features: int = 12, hidden: int = 64, classes: int = 3) -> nn.Module:
    """The factory named by `model.factory._target_`; weights come from `model.checkpoint`."""
    return TabularClassifier(features, hidden, classes)


if __name__ == "__main__":
    from safetensors.torch import save_file

    torch.manual_seed(0)
    save_file(build().state_dict(), sys.argv[1] if len(sys.argv) > 1 else "examples/custom_model.safetensors")
