"""The extension's hooks: declare the backend class (never import a vendor stack here) and the
environment variables that matter to it."""
from __future__ import annotations

from zlf import hookimpl


@hookimpl
def register_backends():
    from .backend import FooBackend

    return [FooBackend]


@hookimpl
def env_prefixes():
    # the variables your runtime reads (device visibility, JIT switches): recorded in meta.json
    return ("FOO_",)
