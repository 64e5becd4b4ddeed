"""The status line of a CUDA C++ candidate: the nvcc compile shows its own phase and time left."""
from __future__ import annotations

import io
import sys
from pathlib import Path

import attrs
import pytest

pytest.importorskip("zlf_taskpkg")
from zlf.cli import main  # noqa: E402
from zlf_taskpkg import judge as judge_mod  # noqa: E402

REPO = Path(__file__).resolve().parents[3]
PKG = REPO / "tests" / "data" / "taskpkg_vecadd"


class Tty(io.StringIO):
    def isatty(self):
        return True


def test_nvcc_compile_shows_its_phase_with_the_compile_limit_left(tmp_path, monkeypatch):
    monkeypatch.delenv("ZLF_NO_PROGRESS", raising=False)
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setenv("COLUMNS", "100")  # a terminal the line fits, whatever the developer's shell exports
    tty = Tty()
    monkeypatch.setattr(sys, "stderr", tty)
    seen = {}

    def fake_compile(candidate, cache, arch, flags, timeout=None):
        seen["line"] = tty.getvalue()  # what the terminal shows while nvcc runs
        return attrs.evolve(candidate, compile_failed=True, compile_output="kernel.cu(1): error: a fake compiler")

    monkeypatch.setattr(judge_mod, "compile_cuda", fake_compile)
    rc = main(["task", str(PKG), "--candidate", str(PKG / "candidates" / "correct.cu"), "--ext", "task",
               "--cases", "1", "--compile-time-limit", "120", "--out", str(tmp_path / "runs")])
    assert rc == 1
    assert seen["line"].endswith("\rcorrect.cu: compiling with nvcc (120 s of 120 s left)")
    assert "\x1b" not in tty.getvalue()
    after = tty.getvalue()[len(seen["line"]):]
    assert after.startswith("\r" + " " * len("correct.cu: compiling with nvcc (120 s of 120 s left)") + "\r")  # cleared


def test_no_compile_phase_off_a_terminal(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("ZLF_NO_PROGRESS", "1")

    def fake_compile(candidate, cache, arch, flags, timeout=None):
        return attrs.evolve(candidate, compile_failed=True, compile_output="error: a fake compiler")

    monkeypatch.setattr(judge_mod, "compile_cuda", fake_compile)
    rc = main(["task", str(PKG), "--candidate", str(PKG / "candidates" / "correct.cu"), "--ext", "task",
               "--cases", "1", "--out", str(tmp_path / "runs")])
    assert rc == 1 and "compiling with nvcc" not in capsys.readouterr().err
