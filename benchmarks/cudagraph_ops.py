"""Ops for ``zlf run --ext cudagraph``: normal points around ones graph capture cannot time.

Used by benchmarks/cudagraph_vs_cupti.py and the GPU tests: ``add_then_item`` syncs the host
inside the timed callable (must fall back, marked ``reason=host_sync``), ``add_after`` shows the
process can still capture after that failure, ``add_on_side_stream`` launches on a stream the
capture never joins (must be marked ``reason=unjoined_stream_work``, not reported too fast).
Run: ``zlf run --ext cudagraph benchmarks/cudagraph_ops.py`` (CUDA only).
"""
import torch

import zlf
from zlf.ops.builtin import add as triton_add

SHAPES = [(1 << 20,)]
_SIDE = {}


def _inputs(shape, dtype, device):
    x = torch.randn(shape, dtype=getattr(torch, dtype), device=device)
    return (x, torch.randn_like(x), torch.empty_like(x))


def _reference(x, y, out):
    return x + y


def _bytes(shape, dtype):
    return 3 * zlf.ops.numel(shape) * zlf.ops.itemsize(dtype)


def _add_then_item(x, y, out):
    triton_add(x, y, out)
    if out[0].item() != out[0].item():  # a host sync inside the timed callable (NaN check)
        raise FloatingPointError("NaN in out")


def _add_on_side_stream(x, y, out):
    side = _SIDE.setdefault(x.device, torch.cuda.Stream(device=x.device))
    with torch.cuda.stream(side):  # never waits on or joins the caller's stream
        triton_add(x, y, out)


def _op(name, fn, description):
    return zlf.Op(name=name, fn=fn, make_inputs=_inputs, shapes=SHAPES, reference=_reference, outputs=(2,),
                  bytes=_bytes, description=description)


add_before = _op("add_before", triton_add, "Triton add 1M fp32 (captures)")
add_then_item = _op("add_then_item", _add_then_item, "Triton add, then .item() on the result (falls back: host_sync)")
add_after = _op("add_after", triton_add, "Triton add 1M fp32 after a failed capture (still captures)")
add_on_side_stream = _op("add_on_side_stream", _add_on_side_stream,
                         "Triton add on an unjoined side stream (marked: unjoined_stream_work)")
