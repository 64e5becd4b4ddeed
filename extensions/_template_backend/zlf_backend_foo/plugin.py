"""The extension's only hook: declare the backend class (never import a vendor stack here)."""
from __future__ import annotations

from zlf import hookimpl


@hookimpl
def register_backends():
    from .backend import FooBackend

    return [FooBackend]
