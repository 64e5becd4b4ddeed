"""Registers the ``maca`` backend; importing this module never touches the device."""
from __future__ import annotations

from zlf import hookimpl


@hookimpl
def register_backends():
    from .backend import MacaBackend

    return [MacaBackend]


@hookimpl
def env_prefixes():
    # MACA_* (the MACA runtime), GEMS_VENDOR (one of the detection signals, zlf_backend_maca.detect)
    return ("MACA_", "GEMS_VENDOR")
