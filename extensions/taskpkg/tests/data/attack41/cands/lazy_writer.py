"""Forged time by racing the checker: after the first call, a call starts a thread that does the 20 ms of
work and returns at once (no work in the call, nothing joined); the checker is told
"called" before the thread wrote. Honest twin: computes in the call."""
import threading
import time

import torch

from _a import honest, work

_calls = [0]


def _late(a, b, out):
    work(a, b, out)


def run_kernel(a, b, out, n):
    _calls[0] += 1
    if honest() or _calls[0] == 1:
        return work(a, b, out)
    threading.Thread(target=_late, args=(a, b, out), daemon=True).start()
