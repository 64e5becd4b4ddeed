"""Class 3, a process that outlives the judge: a double-forked, setsid helper that, for up to five
minutes (until $ZLF_CHEAT_DIR/stop exists), overwrites every shared buffer of later cases it finds
in /dev/shm with zeros, turning a later honest run into Wrong Answer. It writes its pid into
$ZLF_CHEAT_DIR when it can. Honest twin: computes and starts nothing."""
import glob
import os
import time

import torch

from _cheat import honest


def _helper():
    own = set(glob.glob("/dev/shm/**/zlf-task-*", recursive=True))
    end = time.time() + 300
    stop = os.path.join(os.environ.get("ZLF_CHEAT_DIR", "/nonexistent"), "stop")
    while time.time() < end and not os.path.exists(stop):
        for path in glob.glob("/dev/shm/**/zlf-task-*", recursive=True):
            if path in own:
                continue
            try:
                with open(path, "r+b") as f:
                    size = os.fstat(f.fileno()).st_size
                    f.write(bytes(size))
            except OSError:
                pass
        time.sleep(0.005)


def _spawn():
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            mark = os.environ.get("ZLF_CHEAT_DIR")
            if mark:
                try:
                    with open(os.path.join(mark, "survivor.pid"), "w") as f:
                        f.write(str(os.getpid()))
                except OSError:
                    pass
            try:
                _helper()
            finally:
                os._exit(0)
        os._exit(0)
    os.wait()


if not honest():
    _spawn()


def run_kernel(a, b, out, n):
    torch.add(a, b, out=out)
