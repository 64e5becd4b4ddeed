import pytest
import torch

from . import base, consts


def torch_rope(x):
    """The benchmark's torch op: another function than the FlagGems one (as FlagGems'
    apply_rotary_pos_emb benchmark mixes an interleaved cos/sin with rotate_half)."""
    return -x  # the FlagGems op returns x: a relative error of exactly 2 on any input


def gems_rope(x):
    return x


@pytest.mark.rope_mismatch
def test_rope_mismatch():
    bench = base.GenericBenchmark(op_name="rope_mismatch", torch_op=torch_rope,
                                  input_fn=base.unary_input_fn, dtypes=consts.FLOAT_DTYPES)
    bench.set_gems(gems_rope)
    bench.run()
