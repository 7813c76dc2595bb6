"""Tiny models for the parity and FP16-fallback tests (built in the test, no downloads)."""

from __future__ import annotations

import torch
from torch import nn

# Inputs in [5, 10] times weights in [500, 800] over 16 features: |x @ W| ~ 1e5 > 65504 (FP16 max).
# The weights themselves stay below precision.max_finite_val (1e4), so the converter does not clip them.
UNSAFE_INPUTS = "model.inputs=[{name: x, dtype: float32, shape: [batch, 16], low: 5.0, high: 10.0}]"


class Fp16Unsafe(nn.Module):
    """Linear with large weights -> LayerNorm -> small Linear: FP32 is fine, true FP16 overflows."""

    def __init__(self) -> None:
        super().__init__()
        self.big = nn.Linear(16, 32)
        self.norm = nn.LayerNorm(32)
        self.head = nn.Linear(32, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.norm(self.big(x)))


def build_unsafe(seed: int = 0) -> nn.Module:
    """Deterministic Fp16Unsafe."""
    gen = torch.Generator().manual_seed(seed)
    m = Fp16Unsafe()
    with torch.no_grad():
        m.big.weight.copy_(torch.rand(m.big.weight.shape, generator=gen) * 300 + 500)
        m.big.bias.zero_()
        m.head.weight.copy_(torch.randn(m.head.weight.shape, generator=gen) * 0.3)
        m.head.bias.copy_(torch.randn(m.head.bias.shape, generator=gen) * 0.1)
    return m.eval()
