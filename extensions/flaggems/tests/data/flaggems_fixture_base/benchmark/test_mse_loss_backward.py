"""As FlagGems v5.3.4's mse_loss_backward (mean reduction, fp16): at 1024x1024 every gradient is
~4e-6, in float16's subnormal range; the "FlagGems kernel" computes in fp32 and rounds once,
torch's rounds its fp16 intermediates."""
import pytest
import torch

from . import base


def gems_mse_loss_backward(grad_output, inp, target, reduction):
    n = inp.numel()
    return (2 * (inp.float() - target.float()) * grad_output.float() / n).to(inp.dtype)


class MseLossBackwardBenchmark(base.GenericBenchmark):
    def set_shapes(self, shape_file_path=None):
        self.shapes = [(1024, 1024)]


def mse_loss_backward_input_fn(shape, cur_dtype, device):
    grad_output = base.generate_tensor_input(shape, cur_dtype, device)
    inp = base.generate_tensor_input(shape, cur_dtype, device)
    target = base.generate_tensor_input(shape, cur_dtype, device)
    yield grad_output, inp, target, {"reduction": 1}


@pytest.mark.mse_loss_backward
def test_mse_loss_backward():
    bench = MseLossBackwardBenchmark(input_fn=mse_loss_backward_input_fn, op_name="mse_loss_backward",
                                     torch_op=torch.ops.aten.mse_loss_backward, dtypes=[torch.float16])
    bench.set_gems(gems_mse_loss_backward)
    bench.run()
