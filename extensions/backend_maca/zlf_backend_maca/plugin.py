"""Registers the ``maca`` backend; importing this module never touches the device."""
from __future__ import annotations

from zlf import hookimpl


@hookimpl
def register_backends():
    from .backend import MacaBackend

    return [MacaBackend]
