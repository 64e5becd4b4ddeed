"""Fix the random, numpy and torch seeds before every point, and record what was seeded.

Each point gets its own seed derived from ``--seed`` and the point id, so its inputs are
byte-identical in every process whatever ran before it (another op, another subset, another
order) -- which is what lets side A and side B of an A/B time the same data. A fingerprint of
the inputs is recorded per point so that claim can be checked across run directories.
"""
from __future__ import annotations

import hashlib

from zlf import hookimpl
from zlf.options import SEED
from zlf.seeding import seed_everything

DEFAULT_SEED = 0
#: elements read back to the host per tensor for the fingerprint; the rest is covered by a sum.
SAMPLE_ELEMENTS = 1 << 16


def point_seed(base: int, point_id: str) -> int:
    digest = hashlib.sha256(f"{base}:{point_id}".encode()).digest()
    return int.from_bytes(digest[:4], "little")


def fingerprint(tensors) -> str:
    """A cheap digest of tensor contents: evenly strided elements plus an exact integer sum of
    every element's bits, computed on the device (no full copy to the host)."""
    import torch

    h = hashlib.sha256()
    for t in tensors:
        if not isinstance(t, torch.Tensor):
            h.update(repr(t).encode())
            continue
        flat = t.detach().contiguous().reshape(-1)
        h.update(f"{t.dtype}{tuple(t.shape)}".encode())
        if flat.numel() == 0:
            continue
        step = max(1, flat.numel() // SAMPLE_ELEMENTS)
        h.update(flat[::step].cpu().contiguous().view(torch.uint8).numpy().tobytes())
        # Any element size (bool, complex128 ...): sum the bits as the widest integer that divides it.
        width = next(w for w in (8, 4, 2, 1) if flat.element_size() % w == 0)
        bits = flat.view({1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[width])
        h.update(str(int(bits.sum(dtype=torch.int64).item())).encode())
    return h.hexdigest()[:16]


@hookimpl
def add_options(parser, traits):
    if not traits.makes_inputs:  # seeding applies where a command makes point inputs
        return
    g = parser.add_argument_group("seed (extension)")
    g.add_argument("--seed", type=SEED, default=DEFAULT_SEED, metavar="N",
                   help=f"base seed; each point's seed is derived from it and the point id (default {DEFAULT_SEED})")


@hookimpl
def before_run(run):
    run.meta["seed"] = {"base": run.config.options.seed, "per_point": "sha256(base:point_id)[:4]"}
    seed_everything(run.config.options.seed)


@hookimpl
def before_point(run, point):
    seed = point_seed(run.config.options.seed, point.id)
    seed_everything(seed)
    run.annotate("seed", seed)


@hookimpl
def after_point(run, point, record):
    inputs, op = run.current_inputs, run.current_op
    if inputs is None or op is None:
        return
    # Output buffers are overwritten by the kernel: only true inputs are fingerprinted.
    run.annotate("inputs_fingerprint", fingerprint(x for i, x in enumerate(inputs) if i not in op.outputs))
