import pytest
import torch

from . import base

#: the device each input was made on while zlf iterated the benchmark (read by zlf's tests)
MADE_ON = []


class CpuMadeShiftBenchmark(base.Benchmark):
    """As FlagGems' bitwise_left_shift benchmark: integer inputs made on the CPU, then moved."""

    def get_input_iter(self, dtype):
        for shape in self.shapes:
            inp = torch.randint(-100, 100, shape, dtype=dtype, device="cpu")
            MADE_ON.append(inp.device.type)
            shift = torch.randint(0, 8, shape, dtype=dtype, device="cpu").to(self.device)
            yield inp.to(self.device), shift


@pytest.mark.cpu_made_shift
def test_cpu_made_shift():
    bench = CpuMadeShiftBenchmark(op_name="cpu_made_shift", torch_op=torch.bitwise_left_shift,
                                  dtypes=[torch.int32])
    bench.run()
