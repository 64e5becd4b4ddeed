import pytest
import torch

from . import base


class UpsampleBicubic2dAaBackwardBenchmark(base.Benchmark):
    """Inputs built from a private config list (special inputs)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._cfgs = [(2, 3, 8, 8, 4, 4, False, "2x down"), (1, 2, 8, 8, 16, 16, False, "2x up")]

    def get_input_iter(self, cur_dtype):
        for n, c, hi, wi, ho, wo, ac, label in self._cfgs:
            grad = torch.randn([n, c, ho, wo], device=self.device, dtype=cur_dtype)
            yield grad, [ho, wo], [n, c, hi, wi], ac, None, None


@pytest.mark.upsample_bicubic2d_aa_backward
def test_upsample_bicubic2d_aa_backward():
    bench = UpsampleBicubic2dAaBackwardBenchmark(op_name="upsample_bicubic2d_aa_backward",
                                                 torch_op=torch.ops.aten._upsample_bicubic2d_aa_backward,
                                                 dtypes=[torch.float32])
    bench.run()
