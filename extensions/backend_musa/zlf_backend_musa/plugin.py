"""Registers the ``musa`` backend; importing this module never imports torch_musa."""
from __future__ import annotations

from zlf import hookimpl


@hookimpl
def register_backends():
    from .backend import MusaBackend

    return [MusaBackend]


@hookimpl
def env_prefixes():
    # MUSA_VISIBLE_DEVICES, MUSA_LAUNCH_BLOCKING ...: what the MUSA runtime and torch_musa read
    return ("MUSA_",)
