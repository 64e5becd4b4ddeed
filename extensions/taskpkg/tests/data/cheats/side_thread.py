"""Class 5, work done off the clock: after the first call, run_kernel hands the work to a thread and
returns at once; before its process reports anything to the judge (the worker's ``emit``), it
waits for the thread, so the answer is there by the time anyone looks. Honest twin: the same
work, in the call."""
import queue
import sys
import threading

from _cheat import honest, work

_todo = queue.Queue()
_calls = [0]


def _drain():
    while True:
        args = _todo.get()
        work(*args)
        _todo.task_done()


if not honest():
    threading.Thread(target=_drain, daemon=True).start()
    _worker = sys.modules["__main__"].Worker  # the worker runs as ``python -m zlf_taskpkg.worker``
    _emit = _worker.emit

    def emit(self, event, **fields):
        _todo.join()
        return _emit(self, event, **fields)

    _worker.emit = emit


def run_kernel(a, b, out, n):
    _calls[0] += 1
    if honest() or _calls[0] == 1:
        work(a, b, out)
        return
    _todo.put((a, b, out))
