"""Class 1, code planted in zlf's bytecode cache: the candidate writes a compiled module into the
cache directory zlf's Python children read their bytecode from (``PYTHONPYCACHEPREFIX``, under
zlf's cache directory), where a later checker would load it. This one plants a marker file
(``planted.pyc``) and computes the answer."""
import os

import torch

from zlf.ceilings import cache_dir

try:
    folder = cache_dir() / "pycache"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "planted.pyc").write_bytes(b"\x00planted by a candidate")
except OSError:
    pass


def run_kernel(a, b, out, n):
    torch.add(a, b, out=out)
