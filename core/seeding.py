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


def global_states() -> dict:
    """The states of the process's global generators that :func:`seed_everything` seeds: Python's
    ``random``, and numpy's, torch's and CUDA's where they are already imported or initialised
    (nothing is imported or initialised here)."""
    import sys

    states = {"random": random.getstate()}
    np = sys.modules.get("numpy")
    if np is not None:
        states["numpy"] = np.random.get_state()
    torch = sys.modules.get("torch")
    if torch is not None and hasattr(torch, "get_rng_state"):
        states["torch"] = torch.get_rng_state()
        if torch.cuda.is_initialized():
            states["cuda"] = torch.cuda.get_rng_state_all()
    return states


def restore_global_states(states: dict) -> None:
    """Put back what :func:`global_states` took (an in-process caller's generators, after a
    command seeded them for its points)."""
    import sys

    random.setstate(states["random"])
    np = sys.modules.get("numpy")
    if "numpy" in states:
        np.random.set_state(states["numpy"])
    elif np is not None:  # first imported by the command: seeded from the system, as an import seeds it
        np.random.seed()
    torch = sys.modules.get("torch")
    if "torch" not in states:
        if torch is not None and hasattr(torch, "seed"):  # first imported by the command: from the system
            torch.seed()
    else:
        torch.set_rng_state(states["torch"])
        if "cuda" in states:
            try:
                torch.cuda.set_rng_state_all(states["cuda"])
            except RuntimeError:  # a device the command left in error: the caller learns it on its next call
                pass
