import pytest
import torch

from . import base, consts


def mm_input_fn(b, m, n, k, cur_dtype, device, b_column_major):
    a = torch.randn([m, k], dtype=cur_dtype, device=device)
    if b_column_major:
        yield a, torch.randn([n, k], dtype=cur_dtype, device=device).t()
    else:
        yield a, torch.randn([k, n], dtype=cur_dtype, device=device)


@pytest.mark.mm
def test_mm():
    bench = base.BlasBenchmark(op_name="mm", input_fn=mm_input_fn, torch_op=torch.Tensor.mm, dtypes=consts.FLOAT_DTYPES)
    bench.run()
