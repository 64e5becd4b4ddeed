"""atk54's ops: `bytesout` and `byteserr` write bytes to sys.stdout.buffer / sys.stderr.buffer (an
op, or a C library's Python binding, that prints raw bytes) before they do their work."""
import sys

import torch
import zlf


def make(shape, dtype, device):
    x = torch.randn(shape, dtype=getattr(torch, dtype), device=device)
    return (x, torch.empty_like(x))


def _bytes(stream, x, out):
    stream.buffer.write(b"raw bytes of an op\n" * 8)
    stream.buffer.flush()
    out.copy_(x)


def bytesout(x, out):
    _bytes(sys.stdout, x, out)


def byteserr(x, out):
    _bytes(sys.stderr, x, out)


bytes_out = zlf.Op(name="bytes_out", fn=bytesout, make_inputs=make, shapes=[(64,), (96,)],
                   reference=lambda x, out: x.clone(), outputs=(1,))
bytes_err = zlf.Op(name="bytes_err", fn=byteserr, make_inputs=make, shapes=[(64,), (96,)],
                   reference=lambda x, out: x.clone(), outputs=(1,))
