"""Fake flag_gems for zlf's tests: the attributes FlagGems' benchmark harness reads.

``use_gems()`` marks the FlagGems dispatch as active (``ACTIVE``); fixture ops read it to act
as "the FlagGems kernel" (a torch op behaves differently under it). Like the real one, it also
overrides aten kernels for the process while active (a ``torch.library.Library("aten", "IMPL")``
destroyed on exit): ``linalg_vector_norm`` then refuses float64, as FlagGems' kernel does, so
anything that is not the FlagGems call under test and still runs inside the dispatch is caught.
"""
import logging
import os

import torch

from . import runtime
from .runtime import torch_device_fn  # noqa: F401

__version__ = "0.0.0+zlf-fixture"
device = runtime.device.name
vendor_name = runtime.device.vendor_name
ACTIVE = 0
FLAGTUNE_AT_IMPORT = os.environ.get("USE_FLAGTUNE")


class use_gems:
    def __init__(self, include=None, exclude=None):
        self.exclude = exclude

    def __enter__(self):
        global ACTIVE
        ACTIVE += 1
        self.lib = torch.library.Library("aten", "IMPL")
        self.lib.impl("linalg_vector_norm", _vector_norm, "CPU")
        # as later FlagGems checkouts do at every use_gems() (an op listed twice in its config)
        logging.warning("Skipped registering operator: fixture ne_.Scalar listed twice")
        return self

    def __exit__(self, *exc):
        global ACTIVE
        ACTIVE -= 1
        self.lib._destroy()
        del self.lib


def _vector_norm(x, ord=2, dim=None, keepdim=False, *, dtype=None):
    if x.dtype == torch.float64:
        raise NotImplementedError("vector_norm not implemented for torch.float64")
    return torch.sqrt(torch.sum(x.float() * x.float()))


def max_pool2d_with_indices(x, kernel_size):
    """Stands for a FlagGems Triton kernel: its launcher reads each tensor's address
    (``data_ptr``). At address 0 -- a meta tensor -- the real kernel faults the device ("an
    illegal memory access"), which no Python code survives: the process ends here."""
    if x.numel() and x.data_ptr() == 0:
        import sys

        sys.stderr.write("torch.AcceleratorError: CUDA error: an illegal memory access was encountered\n")
        sys.stderr.flush()
        os._exit(1)
    return torch.nn.functional.max_pool2d_with_indices(x, kernel_size)
