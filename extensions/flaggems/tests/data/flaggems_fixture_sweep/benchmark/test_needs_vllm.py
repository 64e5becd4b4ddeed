import pytest
import torch

from . import base, consts


@pytest.mark.needs_vllm
@pytest.mark.skipif(True, reason="vllm is not installed")
def test_needs_vllm():
    bench = base.GenericBenchmark(op_name="needs_vllm", torch_op=torch.exp, input_fn=base.unary_input_fn,
                                  dtypes=consts.FLOAT_DTYPES)
    bench.run()
