"""Patches the package's check from inside the candidate's process (found through sys.modules),
then writes garbage."""
import sys

from _common import HONEST, compute

patched = []


def run_kernel(a, b, out, n):
    for module in list(sys.modules.values()):
        if callable(getattr(module, "genTestCase", None)) and callable(getattr(module, "check", None)):
            if not HONEST:
                module.check = lambda *args, **kwargs: True
            patched.append(module)
    if HONEST:
        compute(a, b, out)
    else:
        out.zero_()
