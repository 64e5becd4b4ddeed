"""The musa backend on a machine without Moore Threads hardware: a fake ``mthreads-gmi`` on
PATH and a fake ``torch_musa`` (what ``import torch_musa`` puts at ``torch.musa``). Runs on CPU."""
import os
import sys
import textwrap
import types
from importlib.machinery import ModuleSpec

import pytest
import torch

from zlf_backend_musa import gmi, plugin
from zlf_backend_musa.backend import MusaBackend

OTHER_PID = 4242


def gmi_output(own_pid: int, throttle: str = "Not Active") -> str:
    """``mthreads-gmi -q -i 0``: the nvidia-smi -q layout the vendor's scripts read."""
    return textwrap.dedent(f"""\
        ==============================================================
        Driver Version                            : 2.7.0
        GPU 00000000:1B:00.0
            Product Name                          : MTT S4000
            GPU UUID                              : GPU-00000000-fake-musa-0001
            MTBios Version                        : 3.4.3
            Bus Id                                : 00000000:1B:00.0
            Clocks Throttle Reasons
                HW Slowdown                       : {throttle}
            Clocks
                Graphics                          : 1750 MHz
            Processes
                Process ID                        : {own_pid}
                    Process Name                  : python
                    Used Memory                   : 512MiB
                Process ID                        : {OTHER_PID}
                    Process Name                  : other_job
                    Used Memory                   : 20480MiB
        """)


class FakeMusa:
    """What torch_musa puts at ``torch.musa``, as far as detection and setup ask."""

    def __init__(self, count: int = 1):
        self.count, self.device_set = count, None

    def is_available(self):
        return self.count > 0

    def device_count(self):
        return self.count

    def set_device(self, index):
        self.device_set = index

    def get_device_name(self, index):
        return "MTT S4000"


@pytest.fixture
def fake_musa(monkeypatch):
    def install(count=1):
        musa = FakeMusa(count)
        module = types.ModuleType("torch_musa")
        module.__spec__ = ModuleSpec("torch_musa", None)
        monkeypatch.setitem(sys.modules, "torch_musa", module)
        monkeypatch.setattr(torch, "musa", musa, raising=False)
        return musa

    return install


@pytest.fixture
def fake_gmi(monkeypatch, tmp_path):
    def install(output: str):
        script = tmp_path / "mthreads-gmi"
        (tmp_path / "gmi.out").write_text(output)
        script.write_text(f'#!/bin/sh\necho "$*" > "{tmp_path}/gmi.args"\ncat "{tmp_path}/gmi.out"\n')
        script.chmod(0o755)
        monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ.get('PATH', '')}")
        return tmp_path / "gmi.args"

    return install


def test_the_plugin_registers_the_backend_and_the_runtime_prefix():
    assert plugin.register_backends() == [MusaBackend]
    assert plugin.env_prefixes() == ("MUSA_",)
    assert "torch_musa" not in sys.modules or isinstance(sys.modules["torch_musa"], types.ModuleType)


def test_without_torch_musa_it_is_unavailable_and_says_what_is_missing(monkeypatch):
    monkeypatch.delitem(sys.modules, "torch_musa", raising=False)
    monkeypatch.setattr("importlib.util.find_spec", lambda name, *a: None)
    assert MusaBackend.is_available() is False
    assert "torch_musa is not installed" in MusaBackend.unavailable_reason()


def test_with_torch_musa_but_no_device_the_reason_counts_the_devices(fake_musa):
    fake_musa(count=0)
    assert MusaBackend.is_available() is False
    assert MusaBackend.unavailable_reason().endswith("torch_musa sees no MUSA device (0 visible)")


def test_with_a_device_it_is_available_and_sets_it_up(fake_musa):
    musa = fake_musa(count=2)
    assert MusaBackend.is_available() is True
    backend = MusaBackend(1)
    backend.setup()
    assert musa.device_set == 1 and backend.device == "musa:1" and backend.device_name() == "MTT S4000"


def test_a_device_index_past_the_visible_ones_is_one_line(fake_musa):
    from zlf import UsageError

    fake_musa(count=1)
    with pytest.raises(UsageError, match=r"--device 3: only 1 MUSA device\(s\) visible"):
        MusaBackend(3).setup()


def test_gmi_query_gives_the_state_and_the_other_processes():
    state = gmi.device_state(gmi_output(os.getpid()), os.getpid())
    assert state["name"] == "MTT S4000" and state["driver_version"] == "2.7.0"
    assert state["mtbios_version"] == "3.4.3" and state["clocks.graphics"] == "1750 MHz"
    assert state["other_processes"] == [f"{OTHER_PID}, other_job, 20480MiB"]
    assert "throttle" not in state


def test_a_throttled_device_and_a_busy_device_are_warned_about(fake_gmi, monkeypatch):
    monkeypatch.setenv("MUSA_VISIBLE_DEVICES", "3,5")
    args = fake_gmi(gmi_output(os.getpid(), throttle="Active"))
    warnings = MusaBackend(1).busy_warnings()
    assert args.read_text().split() == ["-q", "-i", "5"]  # the physical GPU behind visible index 1
    assert any(w.startswith("another process is using MUSA GPU 5: 4242, other_job") for w in warnings)
    assert any("throttled" in w and "HW Slowdown=Active" in w for w in warnings)


def test_without_mthreads_gmi_the_state_is_empty(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    assert MusaBackend(0).device_state() == {} and MusaBackend(0).busy_warnings() == []
