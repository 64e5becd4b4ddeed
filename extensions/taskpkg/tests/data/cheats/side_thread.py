"""Class 5, work done off the clock: run_kernel hands the work to a thread and returns at once;
the answer is there by the time anyone looks. Honest twin: the same work, in the call."""
import threading

from _cheat import honest, work

_busy = threading.Lock()


def run_kernel(a, b, out, n):
    if honest():
        work(a, b, out)
        return
    threading.Thread(target=lambda: (_busy.acquire(), work(a, b, out), _busy.release())).start()
