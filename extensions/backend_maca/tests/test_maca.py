"""The maca backend on a machine without MetaX hardware: a fake ``mx-smi`` on PATH and a fake
``torch.cuda`` answering as mcPytorch does. Runs on CPU."""
import os
import textwrap

import pytest
import torch

from zlf_backend_maca import detect, mxsmi, plugin
from zlf_backend_maca.backend import MacaBackend

OTHER_PID = 4242


def mxsmi_output(own_pid: int, state: str = "Available") -> str:
    """``mx-smi`` (2.2 layout): header, two lines per GPU, a process table."""
    return textwrap.dedent(f"""\
        mx-smi  version: 2.2.9
        +---------------------------------------------------------------------------------+
        | MX-SMI 2.2.9                        Kernel Mode Driver Version: 3.1.2           |
        | MACA Version: 3.2.1.10              BIOS Version: 1.27.0.0                      |
        |------------------------------------+---------------------+----------------------+
        | 0       MetaX C500             Off | 0000:0f:00.0        | 5%            Native |
        | 45C     70W / 350W              P0 | 1024/65536 MiB      | {state:<20} |
        +------------------------------------+---------------------+----------------------+
        | 1       MetaX C500             Off | 0000:34:00.0        | 97%           Native |
        | 71C     330W / 350W             P0 | 60000/65536 MiB     | Available            |
        +------------------------------------+---------------------+----------------------+
        | Process:                                                                        |
        |  GPU                    PID         Process Name                 GPU Memory     |
        |=================================================================================|
        |  0                      {own_pid:<12}python                       1024           |
        |  0                      {OTHER_PID:<12}other_job                    59000          |
        +---------------------------------------------------------------------------------+
        """)


@pytest.fixture(autouse=True)
def _fresh_detection(monkeypatch, tmp_path):
    """Every test: no vendor setting, an empty PATH entry of its own, detection not cached."""
    monkeypatch.delenv("GEMS_VENDOR", raising=False)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ.get('PATH', '')}")
    monkeypatch.setattr(detect, "_installed_triton_backends", lambda: ())
    detect._signals.cache_clear()
    yield
    detect._signals.cache_clear()


def fake_mxsmi(tmp_path, output: str) -> None:
    script = tmp_path / "mx-smi"
    (tmp_path / "mx-smi.out").write_text(output)
    script.write_text(f'#!/bin/sh\ncat "{tmp_path}/mx-smi.out"\n')
    script.chmod(0o755)


def fake_torch_cuda(monkeypatch, available=True):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: available)
    monkeypatch.setattr(torch.version, "hip", None)


def test_the_plugin_registers_the_backend_and_it_supersedes_cuda():
    assert plugin.register_backends() == [MacaBackend]
    assert MacaBackend.supersedes == ("cuda",) and MacaBackend.warp_size == 64


@pytest.mark.parametrize("vendor, expected", [("metax", ["GEMS_VENDOR=metax"]), ("MACA", ["GEMS_VENDOR=maca"]),
                                              ("nvidia", []), ("", [])])
def test_gems_vendor_decides_first(vendor, expected, monkeypatch, tmp_path):
    fake_mxsmi(tmp_path, mxsmi_output(os.getpid()))  # a tool lying around never beats an explicit vendor
    monkeypatch.setenv("GEMS_VENDOR", vendor)
    assert detect.maca_signals() == (expected if vendor else ["mx-smi runs"])


def test_a_metax_triton_backend_is_a_signal(monkeypatch):
    monkeypatch.setattr(detect, "_installed_triton_backends", lambda: ("metax", "nvidia"))
    assert detect.maca_signals() == ["Triton backend 'metax' installed"]


def test_availability_needs_torch_cuda_and_a_signal(monkeypatch, tmp_path):
    fake_torch_cuda(monkeypatch, available=False)
    assert MacaBackend.is_available() is False
    assert "torch sees no device through torch.cuda" in MacaBackend.unavailable_reason()
    fake_torch_cuda(monkeypatch, available=True)
    assert MacaBackend.is_available() is False and MacaBackend.available_when_forced() is True
    assert "select it with --backend maca" in MacaBackend.unavailable_reason()
    fake_mxsmi(tmp_path, mxsmi_output(os.getpid()))
    detect._signals.cache_clear()
    assert MacaBackend.is_available() is True


def test_mx_smi_table_gives_the_state_of_the_device_and_its_other_processes():
    state = mxsmi.device_state(mxsmi_output(os.getpid()), "0", os.getpid())
    assert state["maca_version"] == "3.2.1.10" and state["driver_version"] == "3.1.2"
    assert state["name"] == "MetaX C500" and state["memory.total_mib"] == 65536 and state["state"] == "Available"
    assert state["other_processes"] == [f"{OTHER_PID}, other_job, 59000 MiB"]
    assert mxsmi.device_state(mxsmi_output(os.getpid()), "1", os.getpid())["other_processes"] == []


def test_a_busy_or_unavailable_device_is_warned_about(tmp_path):
    fake_mxsmi(tmp_path, mxsmi_output(os.getpid(), state="Resetting"))
    warnings = MacaBackend(0).busy_warnings()
    assert any(w.startswith("another process is using MetaX GPU 0: 4242, other_job") for w in warnings)
    assert any("reports state 'Resetting'" in w for w in warnings)
