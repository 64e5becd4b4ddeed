"""Whether this machine's Triton compiles for a target at all, asked before anything is written.

:func:`~zlf_ir_dump.fake_driver.parse_target` checks a target's spelling and what can be read
without compiling (the archs ptxas lists), but only the compiler itself knows the rest: an AMD
``gfx`` name of a supported family that LLVM's AMDGPU backend has no processor for, a compute
capability ptxas lists whose own assembler Triton picks does not (``sm_101a`` on Triton 3.9).
Triton exposes no list of either that holds across versions, so :func:`check_target` compiles a
one-line kernel for the target down to its binary and turns a failure into one line naming
``--target``. The kernel is Triton's own cache entry: the next ``zlf ir`` for the target finds it.

Imported only while ``TRITON_INTERPRET`` is off (``zlf ir`` holds it at ``0``): the kernel below
is decorated at import.
"""
from __future__ import annotations

import contextlib
import io
import os
import re
import sys
import tempfile

import triton
import triton.language as tl


@triton.jit
def zlf_target_probe(x):
    tl.store(x, tl.load(x) + 1.0)


#: compiler diagnostics, the most telling first: ptxas's ``ptxas fatal : ...``, MLIR's and LLVM's
#: ``file:line:col: error: ...``
_DIAGNOSTICS = (re.compile(r"\bfatal\s*:\s*(.+)"), re.compile(r"\berror\s*:\s*(.+)"))


def check_target(target, text: str) -> None:
    """Compile :func:`zlf_target_probe` for ``target`` (``--target``'s ``text``); a failure is a
    ``ValueError`` of one line with the compiler's own first diagnostic. What the compiler says
    meanwhile (Triton prints a ptxas failure with its PTX to stdout, MLIR writes diagnostics and
    reproducers to the process's stderr) is kept out of the terminal on failure and passed on,
    to stderr, on success."""
    from triton.compiler import ASTSource

    source = ASTSource(fn=zlf_target_probe, signature={"x": "*fp32"}, constexprs={})
    printed = io.StringIO()
    with tempfile.TemporaryFile(mode="w+b") as captured:
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        saved = [os.dup(1), os.dup(2)]
        failure = None
        try:
            os.dup2(captured.fileno(), 1)
            os.dup2(captured.fileno(), 2)
            with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(printed):
                triton.compile(source, target=target)
        except Exception as exc:  # whatever the compiler raises for a target it does not know
            failure = exc
        finally:
            for fd, copy in zip((1, 2), saved):
                os.dup2(copy, fd)
                os.close(copy)
        captured.seek(0)
        said = printed.getvalue() + captured.read().decode(errors="replace")
    if failure is None:
        if said:
            sys.stderr.write(said)
        return
    version = getattr(triton, "__version__", "?")
    raise ValueError(f"--target {text!r}: Triton {version} cannot compile for it ({_first_diagnostic(failure, said)})")


def _first_diagnostic(exc: BaseException, said: str) -> str:
    """The compiler's first error line (its message part) from the exception and what it printed;
    else the exception's first line."""
    lines = f"{exc}\n{said}".splitlines()
    for pattern in _DIAGNOSTICS:
        for line in lines:
            found = pattern.search(line)
            if found:
                return " ".join(found.group(1).split())
    first = next((line.strip() for line in str(exc).splitlines() if line.strip()), "")
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__
