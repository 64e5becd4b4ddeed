"""Whether this machine's Triton compiles for a target at all, asked before anything is written.

:func:`~zlf_ir_dump.fake_driver.parse_target` checks a target's spelling and what can be read
without compiling (the archs ptxas lists), but only the compiler itself knows the rest: an AMD
``gfx`` name of a supported family that LLVM's AMDGPU backend has no processor for, a compute
capability ptxas lists whose own assembler Triton picks does not (``sm_101a`` on Triton 3.9).
Triton exposes no list of either that holds across versions, so :func:`check_target` compiles a
one-line kernel for the target down to its binary and turns a failure into one line naming
``--target``. The kernel is Triton's own cache entry: the next ``zlf ir`` for the target finds it.

The compile runs in a child process: this file run as a script (``python -P preflight.py``, which
imports Triton alone), with this process's environment and so its Triton cache. What the compiler
prints goes to the child's descriptors, never this process's (a caller's thread printing
meanwhile keeps its stdout), and a compiler that aborts ends the child, not zlf. The child reports
how the compile ended as one JSON object on a descriptor of its own.
"""
from __future__ import annotations

import json
import os
import sys

#: how much of a failure's message the child reports
_MESSAGE_LIMIT = 4000


def check_target(target, text: str) -> None:
    """Compile the probe kernel for ``target`` (``--target``'s ``text``) in a child process; a
    failure is a ``ValueError`` of one line: the compiler's own first diagnostic, the signal that
    ended the compiler, or the Triton cache (``TRITON_CACHE_DIR``) a compile cannot write to.
    What the compiler says meanwhile is kept out of the terminal on failure and passed on, to
    stderr, on success. An interrupt of the child (Ctrl-C reaches the process group) is one here."""
    import signal
    import subprocess
    import tempfile

    import triton

    from zlf.procs import die_with_parent

    with tempfile.TemporaryFile(mode="w+b") as report:
        child = subprocess.Popen(
            [sys.executable, "-P", os.path.abspath(__file__), str(report.fileno()), target.backend, str(target.arch),
             str(target.warp_size)],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, pass_fds=(report.fileno(),),
            preexec_fn=die_with_parent())
        try:
            said, _ = child.communicate()
        finally:
            if child.poll() is None:  # this process was interrupted or terminated: the compile goes too
                child.kill()
                child.wait()
        report.seek(0)
        try:
            result = json.loads(report.read().decode("utf-8", errors="replace") or "null")
        except ValueError:
            result = None
    said = said.decode(errors="replace")
    version = getattr(triton, "__version__", "?")
    if child.returncode == 0 and isinstance(result, dict) and result.get("ok"):
        if said:
            sys.stderr.write(said)
        return
    if child.returncode < 0:
        if -child.returncode == signal.SIGINT:
            raise KeyboardInterrupt
        name = _signal_name(-child.returncode)
        last = _clean(_last_line(said))
        raise ValueError(f"--target {text!r}: Triton {version}'s compiler was killed by {name} while compiling a "
                         f"probe kernel for it" + (f" ({last})" if last else ""))
    if not isinstance(result, dict):
        last = _clean(_last_line(said))
        raise ValueError(f"--target {text!r}: the probe compile of Triton {version} ended without a word (exit "
                         f"{child.returncode})" + (f": {last}" if last else ""))
    kind = result.get("type", "Exception")
    message = str(result.get("message", ""))
    if kind == "KeyboardInterrupt":
        raise KeyboardInterrupt
    if result.get("cache") is not None:  # an OSError on a path in the Triton cache: the cache, not the target
        cache = str(result["cache"])
        name = "TRITON_CACHE_DIR" if os.environ.get("TRITON_CACHE_DIR") else "the Triton cache (TRITON_CACHE_DIR unset)"
        raise ValueError(_clean(f"{name} {cache!r} cannot hold Triton's compiled kernels: {message}"))
    if result.get("os_error"):
        raise ValueError(f"--target {text!r}: the probe compile of Triton {version} failed on a file, not on the "
                         f"target: {_clean(kind)}: {_clean(_first_line(message))}")
    raise ValueError(f"--target {text!r}: Triton {version} cannot compile for it "
                     f"({_clean(_first_diagnostic(kind, message, said))})")


def _signal_name(number: int) -> str:
    import signal

    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _last_line(said: str) -> str:
    return next((line.strip() for line in reversed(said.splitlines()) if line.strip()), "")


def _first_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


def _clean(text: str) -> str:
    from zlf.console import clean

    return clean(text)


def _first_diagnostic(kind: str, message: str, said: str) -> str:
    """The compiler's first error line (its message part) from the exception and what it printed;
    else the exception's first line."""
    import re

    #: compiler diagnostics, the most telling first: ptxas's ``ptxas fatal : ...``, MLIR's and LLVM's
    #: ``file:line:col: error: ...``
    diagnostics = (re.compile(r"\bfatal\s*:\s*(.+)"), re.compile(r"\berror\s*:\s*(.+)"))
    lines = f"{message}\n{said}".splitlines()
    for pattern in diagnostics:
        for line in lines:
            found = pattern.search(line)
            if found:
                return " ".join(found.group(1).split())
    first = _first_line(message)
    return f"{kind}: {first}" if first else kind


# ------------------------------------------------------------------------------ the child's side
def _probe(argv, kernel) -> int:
    """``preflight.py FD BACKEND ARCH WARP_SIZE``: compile ``kernel`` for the target and
    write how it ended to descriptor FD: ``{"ok": true}``, or the exception's ``type`` and
    ``message``, with ``cache`` (Triton's cache folder) when it is an OSError on a path there."""
    report = os.fdopen(int(argv[0]), "w", encoding="utf-8")
    backend, arch, warp_size = argv[1], argv[2], int(argv[3])
    cache = None
    try:
        import triton
        from triton.backends.compiler import GPUTarget
        from triton.compiler import ASTSource

        try:
            from triton import knobs

            cache = knobs.cache.dir
        except (ImportError, AttributeError):  # a Triton before 3.4: no knobs, the same default
            cache = os.environ.get("TRITON_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".triton", "cache")

        target = GPUTarget(backend, int(arch) if backend == "cuda" else arch, warp_size)
        source = ASTSource(fn=kernel, signature={"x": "*fp32"}, constexprs={})
        triton.compile(source, target=target)
    except BaseException as exc:  # whatever the compiler raises for a target it does not know; an interrupt
        found = {"type": type(exc).__name__, "message": str(exc)[:_MESSAGE_LIMIT], "os_error": isinstance(exc, OSError)}
        if isinstance(exc, OSError) and cache and _under(exc, cache):
            found["cache"] = cache
        json.dump(found, report)
        report.close()
        return 1
    json.dump({"ok": True}, report)
    report.close()
    return 0


def _under(exc: OSError, folder: str) -> bool:
    """``exc`` names a path inside ``folder``."""
    names = [n for n in (exc.filename, exc.filename2) if isinstance(n, str)]
    root = os.path.abspath(folder)
    return any(os.path.abspath(n) == root or os.path.abspath(n).startswith(root + os.sep) for n in names)


if __name__ == "__main__":
    import triton
    import triton.language as tl

    @triton.jit
    def zlf_target_probe(x):
        tl.store(x, tl.load(x) + 1.0)

    sys.exit(_probe(sys.argv[1:], zlf_target_probe))
