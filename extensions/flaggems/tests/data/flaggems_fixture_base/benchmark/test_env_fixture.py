"""As FlagGems v5.3.4's get_scheduler_metadata (``monkeypatch.setenv`` before building the
Benchmark), and a test taking a pytest fixture zlf does not provide."""
import os

import pytest
import torch

from . import base


def env_scaled(x):
    """Reads the environment the test set, at every call: the op needs it while it runs."""
    return x * float(os.environ["ZLF_FIXTURE_SCALE"])


@pytest.mark.env_scaled
def test_env_scaled(monkeypatch, tmp_path):
    monkeypatch.setenv("ZLF_FIXTURE_SCALE", "2")
    assert tmp_path.is_dir()
    bench = base.GenericBenchmark(op_name="env_scaled", torch_op=env_scaled, input_fn=base.unary_input_fn,
                                  dtypes=[torch.float32])
    bench.run()


@pytest.mark.needs_capsys
def test_needs_capsys(capsys):
    bench = base.GenericBenchmark(op_name="needs_capsys", torch_op=torch.exp, input_fn=base.unary_input_fn,
                                  dtypes=[torch.float32])
    bench.run()
