"""Telling apart platforms that torch alone cannot: MetaX MACA behind ``torch.cuda``.

mcPytorch exposes MACA devices as ``torch.cuda``, so ``torch.cuda.is_available()`` is True on
both NVIDIA and MetaX machines. The ``maca`` backend is available when any signal is found, and
then supersedes core's ``cuda`` (``MacaBackend.supersedes``): core's backend selection leaves
such a machine to it.
"""
from __future__ import annotations

import functools
import os

from zlf.backends.base import run_vendor_cli

#: ``GEMS_VENDOR`` values (FlagGems' explicit vendor setting) that mean MetaX.
MACA_VENDOR_NAMES = ("metax", "maca")
#: Triton backend folder names of MetaX builds (FlagTree ``third_party/metax``).
MACA_TRITON_BACKENDS = ("metax", "maca")


def _installed_triton_backends() -> tuple:
    try:
        from triton import backends

        return tuple(sorted(getattr(backends, "backends", {}) or {}))
    except Exception:  # a broken Triton build says nothing about the vendor
        return ()


@functools.lru_cache(maxsize=8)
def _signals(vendor: str, path: str) -> tuple:
    found = []
    if vendor in MACA_VENDOR_NAMES:
        return (f"GEMS_VENDOR={vendor}",)
    if vendor:
        return ()  # an explicit other vendor wins over tools and Triton builds lying around
    if run_vendor_cli("mx-smi") is not None:
        found.append("mx-smi runs")
    names = [n for n in _installed_triton_backends() if n in MACA_TRITON_BACKENDS]
    if names:
        found.append(f"Triton backend {names[0]!r} installed")
    return tuple(found)


def maca_signals(environ=None) -> list:
    """Why this machine looks like MetaX MACA (empty list: it does not).

    Checked in order: ``GEMS_VENDOR`` (an explicit setting; any other vendor there means "not
    MACA"), a working ``mx-smi`` (what FlagGems checks), a MetaX backend in the Triton build.
    Cached per (``GEMS_VENDOR``, ``PATH``): ``mx-smi`` is run at most once per process.
    """
    environ = os.environ if environ is None else environ
    return list(_signals(environ.get("GEMS_VENDOR", "").strip().lower(), environ.get("PATH", "")))
