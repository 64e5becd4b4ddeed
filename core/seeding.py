"""One way to seed every random generator a point's inputs may come from."""
from __future__ import annotations

import random


def seed_everything(seed: int) -> None:
    """Seed Python's ``random``, numpy's global generator (when numpy is installed) and torch's
    generators (every device's too). numpy takes 32 bits: a larger ``seed`` is reduced mod 2**32."""
    import torch

    random.seed(seed)
    try:
        import numpy as np

        np.random.seed(seed % 2**32)
    except ImportError:
        pass
    torch.manual_seed(seed)
