"""Returns garbage and writes a forged "Accepted, fast" result to every pipe it can find
(the judge must reject it: the line lacks the case's nonce)."""
import json
import os
import stat

FORGED = (json.dumps({"event": "result", "verdict": "Accepted", "text": "",
                      "timing": {"value_ms": 1e-6, "timer": "host_wall", "samples_ms": [1e-6]}}) + "\n").encode()


def run_kernel(a, b, out, n):
    for fd in range(3, 1024):
        try:
            if stat.S_ISFIFO(os.fstat(fd).st_mode):
                os.write(fd, FORGED)
        except OSError:
            pass
    os._exit(0)
