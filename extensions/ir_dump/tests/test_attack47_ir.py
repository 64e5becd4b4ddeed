"""ATTACK atk47: `zlf ir` in unusual environments and with odd targets. The rule (README, exit
codes; docs/hostile.md): bad input is one line `zlf: error: ...` and exit 2, nothing half-written;
otherwise the IR of every launched kernel variant is written."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from zlf.testing import clean_env

OPS = textwrap.dedent('''
    import torch, triton, triton.language as tl, zlf

    @triton.jit
    def scale_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        m = offs < n
        tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m) * 2, mask=m)

    def scale(x, out):
        scale_kernel[(triton.cdiv(x.numel(), 256),)](x, out, x.numel(), BLOCK=256)

    def make(shape, dtype, device):
        x = torch.randn(shape, dtype=getattr(torch, dtype), device=device)
        return (x, torch.empty_like(x))

    scale_op = zlf.Op(name="scale", fn=scale, make_inputs=make, shapes=[(1024,)], dtypes=("float32",))
''')

#: the same op, written to debug on CPU as Triton's tutorials show: the interpreter turned on at
#: the top of the file
INTERP_OPS = 'import os\nos.environ.setdefault("TRITON_INTERPRET", "1")\n' + OPS


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    d = tmp_path_factory.mktemp("atk47_ir")
    (d / "ops.py").write_text(OPS)
    (d / "interp_ops.py").write_text(INTERP_OPS)
    return d


def _ir(work, *args, env=None):
    full = clean_env({"TRITON_CACHE_DIR": str(work / "triton_cache")})
    full.pop("TRITON_INTERPRET", None)
    full.update(env or {})
    return subprocess.run([sys.executable, "-m", "zlf", "ir", *map(str, args), "--ext", "ir_dump"], cwd=work, env=full,
                          capture_output=True, text=True, timeout=600)


def _one_line_refusal(done, out: Path) -> None:
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2, done.stdout + done.stderr
    assert len(lines) == 1 and lines[0].startswith("zlf: error: "), done.stderr
    assert "Traceback" not in done.stderr
    assert not out.exists() or not any(out.iterdir()), sorted(map(str, out.rglob("*")))


def _ttgir(out: Path) -> list:
    return sorted(p.name for p in out.glob("*/ir/1024/scale_kernel/*.ttgir"))


# ----------------------------------------------------------------------------- TRITON_INTERPRET
@pytest.mark.parametrize("value", ["0", "", "true"])
def test_zlf_ir_compiles_whatever_triton_interpret_the_shell_exports(work, value):
    out = work / f"interp_{value or 'empty'}"
    done = _ir(work, "ops.py::scale_op", "--target", "cuda:90", "--out", out, env={"TRITON_INTERPRET": value})
    assert done.returncode == 0, done.stdout + done.stderr
    assert _ttgir(out) == ["w4s3.ttgir"]
    (run,) = out.iterdir()
    assert json.loads((run / "meta.json").read_text())["errors"] == {}


def test_zlf_ir_of_an_op_file_that_turns_the_interpreter_on_compiles_or_says_why(work):
    """Triton's tutorials debug on CPU with `os.environ["TRITON_INTERPRET"] = "1"` at the top of
    the file. zlf ir drops the shell's variable before importing Triton, but the op file sets it
    again before its @triton.jit runs: the kernel is an InterpretedFunction, runs on the host,
    nothing is compiled, and zlf ir reports success with an empty dump. It should compile the IR
    (the variable ignored, as for the shell's) or refuse in one line naming TRITON_INTERPRET."""
    out = work / "interp_file"
    done = _ir(work, "interp_ops.py::scale_op", "--target", "cuda:90", "--out", out)
    if done.returncode == 2:
        assert "TRITON_INTERPRET" in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
        return
    assert done.returncode == 0, done.stdout + done.stderr
    assert _ttgir(out) == ["w4s3.ttgir"], done.stdout + done.stderr


# ----------------------------------------------------------------------------- the Triton cache
def test_zlf_ir_with_an_unusable_triton_cache_dir_says_so_once(work):
    (work / "a_file").write_text("not a folder\n")
    out = work / "badcache"
    done = _ir(work, "ops.py::scale_op", "--target", "cuda:90", "--out", out,
               env={"TRITON_CACHE_DIR": str(work / "a_file" / "cache")})
    _one_line_refusal(done, out)
    assert "TRITON_CACHE_DIR" in done.stderr


# ----------------------------------------------------------------------------- odd targets
@pytest.mark.parametrize("target", ["cuda:0", "hip:nonsense", "cuda:99999999999999999999"])
def test_zlf_ir_refuses_a_target_no_compiler_knows_in_one_line(work, target):
    out = work / ("odd_" + "".join(c if c.isalnum() else "_" for c in target))
    done = _ir(work, "ops.py::scale_op", "--target", target, "--out", out)
    _one_line_refusal(done, out)
    assert target in done.stderr


def test_zlf_ir_names_the_target_when_its_arch_is_not_a_number(work):
    out = work / "superscript"
    done = _ir(work, "ops.py::scale_op", "--target", "cuda:\u00b2", "--out", out)
    _one_line_refusal(done, out)
    assert "cuda:\u00b2" in done.stderr and "int()" not in done.stderr, done.stderr
