"""Class 1, code planted in the interpreter: a ``.pth`` written into site-packages runs in every
later Python process of this interpreter (checkers included). This one is a harmless marker
(a comment line); the test removes it. Honest twin: writes nothing."""
import os
import site

import torch

from _cheat import honest

MARK = "zlf_taskpkg_cheat_probe.pth"

if not honest():
    for folder in site.getsitepackages():
        try:
            with open(os.path.join(folder, MARK), "w") as f:
                f.write("# planted by a candidate\n")
        except OSError:
            pass


def run_kernel(a, b, out, n):
    torch.add(a, b, out=out)
