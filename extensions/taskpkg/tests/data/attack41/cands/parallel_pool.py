"""Forged time: each call hands its work to a pool of three threads and returns after 3 ms; the
worker's ``emit`` waits for the pool before anything is reported. The judge's clocked batch makes
its three calls back to back, so the pool runs them at once: the clock sees one call's work
(20 ms) for three calls, and its bound ((per call - 5 ms slack) / 2) falls below the reported
3 ms. Honest twin: the same work, in the call."""
import sys
import time
from concurrent.futures import ThreadPoolExecutor, wait

from _a import honest, work

_pool = ThreadPoolExecutor(3)
_pending = []

if not honest():
    _worker = sys.modules["__main__"].Worker
    _emit = _worker.emit

    def emit(self, event, **fields):
        wait(list(_pending))
        _pending.clear()
        return _emit(self, event, **fields)

    _worker.emit = emit


def run_kernel(a, b, out, n):
    if honest():
        return work(a, b, out)
    _pending.append(_pool.submit(work, a, b, out))
    time.sleep(0.003)
