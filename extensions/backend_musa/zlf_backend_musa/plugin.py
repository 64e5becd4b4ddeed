"""Registers the ``musa`` backend; importing this module never imports torch_musa."""
from __future__ import annotations

from zlf import hookimpl


@hookimpl
def register_backends():
    from .backend import MusaBackend

    return [MusaBackend]
