"""``zlf run`` on a real pseudo-terminal: warnings and per-point lines above a live bar, the bar
moving point by point, the results table alone after it."""
from __future__ import annotations

import fcntl
import os
import pty
import re
import struct
import subprocess
import sys
import termios

from zlf.testing import clean_env, core_only_env

OPS = '''\
import logging
import warnings

import torch
import zlf
from zlf.console import warn


def make_inputs(shape, dtype, device):
    warnings.warn("python warning from make_inputs")
    warn("zlf warning from make_inputs")
    logging.getLogger("my_ops").warning("logged from make_inputs")
    x = torch.randn(shape, dtype=getattr(torch, dtype), device=device)
    return (x, torch.empty_like(x))


neg = zlf.Op(name="neg", fn=lambda x, out: torch.neg(x, out=out), make_inputs=make_inputs,
             shapes=[(64,), (128,), (256,)], dtypes=("float32",), reference=lambda x, out: -x, outputs=(1,))
'''


def _run_on_pty(args, cwd, env) -> str:
    """The bytes a terminal would receive from ``python -m zlf ARGS`` (newlines not translated)."""
    master, slave = pty.openpty()
    attrs = termios.tcgetattr(slave)
    attrs[1] &= ~termios.ONLCR  # keep "\n" as the program wrote it: "\r" then means a redraw
    termios.tcsetattr(slave, termios.TCSANOW, attrs)
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 30, 120, 0, 0))  # 30 rows, 120 columns
    proc = subprocess.Popen([sys.executable, "-m", "zlf", *args], cwd=cwd, env=env, stdin=slave, stdout=slave,
                            stderr=slave, close_fds=True)
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    assert proc.wait(timeout=300) == 0
    return b"".join(chunks).decode("utf-8", "replace")


def _screen_lines(raw: str) -> list:
    """What stays on screen of each line: the text after its last carriage return, escapes gone."""
    raw = re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", raw)
    return [line.rsplit("\r", 1)[-1].rstrip() for line in raw.split("\n")]


def test_bar_moves_and_lines_print_above_it(tmp_path):
    (tmp_path / "my_ops.py").write_text(OPS)
    env = clean_env({**core_only_env(), "ZLF_CACHE_DIR": str(tmp_path / "cache"), "TERM": "xterm"})
    env.pop("ZLF_NO_PROGRESS")
    raw = _run_on_pty(["run", "my_ops.py::neg", "--backend", "cpu", "--out", "runs"], tmp_path, env)
    # the bar was drawn at each count, not only at 0/3
    for done in (1, 2, 3):
        assert re.search(rf"points:\s+\d+%\|[^\r\n]*\| {done}/3", raw), raw
    screen = _screen_lines(raw)
    for text in ("zlf: warning: zlf warning from make_inputs", "python warning from make_inputs",
                 "logged from make_inputs", "[1/3] neg/64/float32 ok", "[3/3] neg/256/float32 ok"):
        assert any(text in line and "points:" not in line for line in screen), (text, screen)
    assert not any("points:" in line and "warning" in line for line in screen), screen
    header = next(i for i, line in enumerate(screen) if line.startswith("point ") and "status" in line)
    assert all("points:" not in line and "%|" not in line for line in screen[header:]), screen[header:]
    assert "%|" not in raw[raw.index("run dir:"):]
