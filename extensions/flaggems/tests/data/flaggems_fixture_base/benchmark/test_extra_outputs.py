"""As FlagGems v5.3.4's cudnn_attention_forward: the FlagGems op returns one floating tensor
more than the torch op (aten's debug mask as an empty tensor of the query's dtype)."""
import pytest
import torch

from . import base


def attn_torch(q, k):
    out = torch.softmax(q @ k.transpose(-1, -2), dim=-1)
    return out, torch.logsumexp(q, dim=-1), torch.zeros([0], dtype=torch.int64)


def attn_gems(q, k):
    out = torch.softmax(q @ k.transpose(-1, -2), dim=-1)
    return out, torch.logsumexp(q, dim=-1), torch.zeros([0], dtype=q.dtype)


def attn_input_fn(shape, dtype, device):
    yield torch.randn(shape, dtype=dtype, device=device), torch.randn(shape, dtype=dtype, device=device)


@pytest.mark.extra_outputs
def test_extra_outputs():
    bench = base.GenericBenchmark(op_name="extra_outputs", torch_op=attn_torch, input_fn=attn_input_fn,
                                  dtypes=[torch.float32])
    bench.set_gems(attn_gems)
    bench.run()
