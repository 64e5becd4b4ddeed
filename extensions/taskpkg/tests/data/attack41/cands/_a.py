"""Helpers of atk41's cheats (the candidate's folder is importable)."""
import gc
import json
import os
import sys
import time

import torch

WORK_MS = 20.0


def honest() -> bool:
    return os.environ.get("FORGE_HONEST") == "1"


def work(a, b, out):
    time.sleep(WORK_MS / 1000)
    torch.add(a, b, out=out)


def spec() -> dict:
    args = open("/proc/self/cmdline", "rb").read().split(b"\0")
    path = next(a.decode() for a in args if a.endswith(b"worker.json"))
    return json.loads(open(path).read())


def worker():
    """The worker object (``python -m zlf_taskpkg.worker`` runs as __main__)."""
    cls = sys.modules["__main__"].Worker
    return next(o for o in gc.get_objects() if isinstance(o, cls))


def in_frame(name: str) -> bool:
    f = sys._getframe(1)
    while f is not None:
        if f.f_code.co_name == name:
            return True
        f = f.f_back
    return False
