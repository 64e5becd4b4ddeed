"""Helpers the cheats share (importable: the candidate's folder is on sys.path)."""
import json
import os
import time

import torch

#: the simulated cost of the real work, ms: large enough that a lie about it shows
WORK_MS = 20.0


def honest() -> bool:
    return os.environ.get("FORGE_HONEST") == "1"


def work(a, b, out):
    """The honest computation, with a cost the judge's clock can see."""
    time.sleep(WORK_MS / 1000)
    torch.add(a, b, out=out)


def spec() -> dict:
    """The worker's spec (the judge's own file), as a candidate finds it: /proc/self/cmdline."""
    args = open("/proc/self/cmdline", "rb").read().split(b"\0")
    path = next(a.decode() for a in args if a.endswith(b"worker.json"))
    return json.loads(open(path).read())
