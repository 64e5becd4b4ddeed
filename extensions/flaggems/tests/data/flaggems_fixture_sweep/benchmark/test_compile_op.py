import os
import time

import pytest
import torch
import triton
import triton.language as tl
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from triton.runtime.jit import JITFunction

import flag_gems

from . import base, consts


def _plus(x, C: tl.constexpr):
    tl.store(x, tl.load(x) + C)


_plus = JITFunction(_plus)  # compiled, not interpreted, whatever TRITON_INTERPRET says


def compile_op(x):
    """Under FlagGems' dispatch: a first call that compiles Triton kernels without end (a tuning
    sweep longer than any limit), one every ~0.3 s, each new (a constant never used before)."""
    if flag_gems.ACTIVE:
        i = os.getpid() * 100000
        while True:
            i += 1
            triton.compile(ASTSource(_plus, {"x": "*fp32", "C": "constexpr"}, {"C": i}),
                           target=GPUTarget("cuda", 90, 32))
            time.sleep(0.2)
    return torch.exp(x)


@pytest.mark.compile_op
def test_compile_op():
    bench = base.GenericBenchmark(op_name="compile_op", torch_op=compile_op, input_fn=base.unary_input_fn,
                                  dtypes=consts.FLOAT_DTYPES)
    bench.run()
