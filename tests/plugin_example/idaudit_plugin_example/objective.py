"""The objective ``hinge``: λ·mean(relu(1 − std per dimension)) + (1 − λ)·alignment."""

import torch

from idaudit.core.registered import Objective


def hinge(h: torch.Tensor, lamb: float, sigma: float, directions: torch.Tensor | None):
    spread = torch.relu(1.0 - h.std(dim=1)).mean()
    align = (h[0] - h[1]).pow(2).sum(dim=1).mean()
    return lamb * spread + (1.0 - lamb) * align, {"spread": spread, "alignment": align}


HINGE = Objective(hinge)
