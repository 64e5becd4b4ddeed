"""atk51's ops: `slow` waits, on its second shape, for the file named by ATK_GATE (when set), after
writing its process id to ATK_PID (when set)."""
import os
import time

import torch
import zlf


def make(shape, dtype, device):
    x = torch.randn(shape, dtype=getattr(torch, dtype), device=device)
    return (x, torch.empty_like(x))


def fn(x, out):
    out.copy_(x)


def slowfn(x, out):
    gate = os.environ.get("ATK_GATE")
    if gate and x.shape[0] == 128:
        pidfile = os.environ.get("ATK_PID")
        if pidfile:
            with open(pidfile, "w") as f:
                f.write(str(os.getpid()))
        while not os.path.exists(gate):
            time.sleep(0.05)
    out.copy_(x)


fast = zlf.Op(name="fast", fn=fn, make_inputs=make, shapes=[(64,), (96,)],
              reference=lambda x, out: x.clone(), outputs=(1,))
slow = zlf.Op(name="slow", fn=slowfn, make_inputs=make, shapes=[(64,), (128,), (256,)],
              reference=lambda x, out: x.clone(), outputs=(1,))


def chattyfn(x, out):
    import sys
    print("chatty op says " * 20)  # an op (or the compiler under it) that talks on stdout and stderr
    print("chatty op warns " * 20, file=sys.stderr)
    sys.stdout.flush()
    sys.stderr.flush()
    out.copy_(x)


chatty = zlf.Op(name="chatty", fn=chattyfn, make_inputs=make, shapes=[(64,), (96,)],
                reference=lambda x, out: x.clone(), outputs=(1,))
