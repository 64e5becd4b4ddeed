import pytest
import torch

from . import base, consts


class AvgPool2dBenchmark(base.GenericBenchmark):
    """Shapes hard-coded inside get_input_iter."""

    def get_input_iter(self, cur_dtype):
        for shape in [(2, 3, 32, 32), (4, 8, 16, 16)]:
            yield from self.input_fn(shape, cur_dtype, self.device)


def avg_pool2d_input_fn(shape, dtype, device):
    yield base.generate_tensor_input(shape, dtype, device), {"kernel_size": 3, "stride": 2, "padding": 1}


@pytest.mark.avg_pool2d
def test_avg_pool2d():
    bench = AvgPool2dBenchmark(input_fn=avg_pool2d_input_fn, op_name="avg_pool2d",
                               torch_op=torch.nn.functional.avg_pool2d, dtypes=consts.FLOAT_DTYPES)
    bench.run()
