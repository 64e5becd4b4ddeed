"""Fake flag_gems for zlf's tests: the attributes FlagGems' benchmark harness reads.

``use_gems()`` marks the FlagGems dispatch as active (``ACTIVE``); fixture ops read it to act
as "the FlagGems kernel" (a torch op behaves differently under it).
"""
import os

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
        return self

    def __exit__(self, *exc):
        global ACTIVE
        ACTIVE -= 1
