"""A small residual image classifier with deterministic weights (for tests and demos)."""

from __future__ import annotations

import torch
from torch import nn


class ResidualBlock(nn.Module):
    """conv-bn-relu-conv-bn plus identity (or 1x1 projection), then relu."""

    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.skip: nn.Module = nn.Identity()
        if stride != 1 or cin != cout:
            self.skip = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return torch.relu(y + self.skip(x))


class SmallResNet(nn.Module):
    """Stem + three residual stages + global average pool + linear head."""

    def __init__(self, num_classes: int = 10, width: int = 16) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, width, 3, 1, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU())
        self.stages = nn.Sequential(
            ResidualBlock(width, width, 1),
            ResidualBlock(width, 2 * width, 2),
            ResidualBlock(2 * width, 4 * width, 2),
        )
        self.head = nn.Linear(4 * width, num_classes)

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        x = self.stages(self.stem(image))
        return self.head(x.mean(dim=(2, 3)))


def build(num_classes: int = 10, width: int = 16, seed: int = 0) -> nn.Module:
    """Deterministic weights from ``seed``; BatchNorm statistics made non-trivial so folding is exercised."""
    gen = torch.Generator().manual_seed(seed)
    model = SmallResNet(num_classes, width)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * 0.1)
        for m in model.modules():
            # every BatchNorm2d here tracks running statistics (the default), so both buffers exist
            if isinstance(m, nn.BatchNorm2d) and m.running_mean is not None and m.running_var is not None:
                m.running_mean.copy_(torch.randn(m.running_mean.shape, generator=gen) * 0.1)
                m.running_var.copy_(torch.rand(m.running_var.shape, generator=gen) + 0.5)
                m.weight.copy_(torch.rand(m.weight.shape, generator=gen) + 0.5)
    return model.eval()
