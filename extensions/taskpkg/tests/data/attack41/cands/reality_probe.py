"""Says what sandbox it really runs in: its pid namespace and whether the judge's processes are
visible (``PROBE ns: <inode>``, ``PROBE sees_checker: yes|no``). Computes honestly."""
import os

import torch

print(f"PROBE ns: {os.readlink('/proc/self/ns/pid')}", flush=True)
seen = False
for pid in os.listdir("/proc"):
    if pid.isdigit():
        try:
            seen = seen or b"zlf_taskpkg.checker" in open(f"/proc/{pid}/cmdline", "rb").read()
        except OSError:
            pass
print(f"PROBE sees_checker: {'yes' if seen else 'no'}", flush=True)


def run_kernel(a, b, out, n):
    torch.add(a, b, out=out)
