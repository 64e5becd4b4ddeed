"""Candidates: a Python module defining ``run_kernel(*args)`` (Triton, TileLang, torch), or a
CUDA C++ file defining ``extern "C" void run_kernel(...)``.

CUDA C++ is compiled by nvcc once per hash of (source, flags, nvcc version) into a cache
directory and loaded with ctypes: tensors are passed as device pointers, ints as ``int64_t``,
floats as ``double``, in argument order. A small shim compiled into the same library reports
launch errors (``cudaGetLastError`` of the library's own runtime, which torch cannot see).
"""
from __future__ import annotations

import ctypes
import hashlib
import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Optional

import attrs

from zlf import UsageError
from zlf.procs import die_with_parent, kill_group

KIND_PYTHON = "python"
KIND_CUDA = "cuda"
CUDA_SUFFIXES = (".cu", ".cpp", ".cc", ".cxx")
DEFAULT_ARCH = "sm_90a"
NVCC_FLAGS = ("-O3", "-std=c++17", "-shared", "-Xcompiler", "-fPIC", "-lineinfo")

SHIM = r"""
#include <cuda_runtime.h>
#include <string.h>
extern "C" int zlf_task_last_error(char* buf, int n) {
  cudaError_t e = cudaGetLastError();
  if (e == cudaSuccess) return 0;
  strncpy(buf, cudaGetErrorString(e), n - 1);
  buf[n - 1] = 0;
  return (int)e;
}
"""


@attrs.frozen
class Candidate:
    """The file under test. ``library`` is the compiled shared object of a CUDA C++ candidate;
    ``compile_output`` the compiler's output (also when it failed: then ``compile_failed``)."""

    path: Path
    kind: str
    sha256: str
    library: Optional[str] = None
    compile_output: str = ""
    compile_failed: bool = False
    compile_cached: bool = False

    @classmethod
    def open(cls, path) -> "Candidate":
        p = Path(path).resolve()
        if not p.is_file():
            raise UsageError(f"candidate {str(path)!r} not found")
        if p.suffix == ".py":
            kind = KIND_PYTHON
        elif p.suffix in CUDA_SUFFIXES:
            kind = KIND_CUDA
        else:
            raise UsageError(f"candidate {str(path)!r}: expected a .py module or a CUDA C++ file ({', '.join(CUDA_SUFFIXES)})")
        return cls(path=p, kind=kind, sha256=hashlib.sha256(p.read_bytes()).hexdigest())

    def to_json(self) -> dict:
        return {"path": str(self.path), "kind": self.kind, "sha256": self.sha256, "library": self.library,
                "compile_cached": self.compile_cached, "compile_failed": self.compile_failed}


# ----------------------------------------------------------------------------- CUDA C++
def find_nvcc() -> Optional[str]:
    found = shutil.which("nvcc")
    if found:
        return found
    for home in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if home and os.path.isfile(os.path.join(home, "bin", "nvcc")):
            return os.path.join(home, "bin", "nvcc")
    return None


def default_arch(backend) -> str:
    """``sm_XY`` of the device the run uses (``a`` variant from Hopper on, so wgmma/TMA code
    compiles); ``sm_90a`` where there is no CUDA device (the compile still checks the source)."""
    if getattr(backend, "name", "") == "cuda":
        import torch

        major, minor = torch.cuda.get_device_capability(backend.index)
        return f"sm_{major}{minor}{'a' if major >= 9 else ''}"
    return DEFAULT_ARCH


def default_cache_dir() -> Path:
    if os.environ.get("ZLF_TASK_CACHE"):
        return Path(os.environ["ZLF_TASK_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "zlf" / "taskpkg"


def _run_limited(cmd, timeout: Optional[float]) -> tuple:
    """``(returncode, output)``; returncode None when ``cmd`` ran past ``timeout`` s. The command
    gets its own process group, so the kill also takes nvcc's children (cicc, ptxas)."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
                            preexec_fn=die_with_parent(signal.SIGKILL))
    try:
        out, _ = proc.communicate(timeout=timeout)
        return proc.returncode, out
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        out, _ = proc.communicate()
        return None, out or ""
    except BaseException:  # Ctrl-C / SIGTERM: nvcc and its children are in their own group
        kill_group(proc)
        raise


def compile_cuda(candidate: Candidate, cache_dir, arch: str, extra_flags=(), timeout: Optional[float] = None) -> Candidate:
    """Compile once per hash; a cache hit costs a stat. Returns the candidate with ``library``
    set, or with ``compile_failed`` and the compiler's output (also when nvcc ran past
    ``timeout`` seconds and was killed)."""
    # No usable nvcc is the judge machine's set-up problem, not the candidate's Compile Error.
    nvcc = find_nvcc()
    if nvcc is None:
        raise UsageError("nvcc not found (PATH, CUDA_HOME, /usr/local/cuda): this machine cannot compile "
                         f"CUDA C++ candidates such as {candidate.path.name!r} (install the CUDA toolkit)")
    try:
        rc, version = _run_limited([nvcc, "--version"], timeout)
    except OSError as exc:
        raise UsageError(f"nvcc {nvcc!r} cannot be run: {exc.strerror or exc}") from None
    if rc is None:
        raise UsageError(f"`{nvcc} --version` did not finish within the compile time limit of {timeout:g} s: "
                         "the CUDA toolkit of this machine is broken")
    if rc != 0:
        raise UsageError(f"`{nvcc} --version` failed (exit code {rc}): the CUDA toolkit of this machine is broken")
    flags = [*NVCC_FLAGS, f"-arch={arch}", *extra_flags]
    key = hashlib.sha256("\0".join([candidate.sha256, SHIM, " ".join(flags), version]).encode()).hexdigest()[:24]
    entry = Path(cache_dir) / key
    library = entry / "candidate.so"
    if library.is_file():
        refused = cache_refusal(Path(cache_dir), entry, library)
        if refused is None:
            log = entry / "nvcc.log"
            return attrs.evolve(candidate, library=str(library), compile_cached=True,
                                compile_output=log.read_text(errors="replace") if log.is_file() else "")
        print(f"zlf task: not using the cached library {library}: {refused}; compiling again", file=sys.stderr)
    entry.mkdir(parents=True, exist_ok=True)
    refused = cache_refusal(Path(cache_dir), entry)
    if refused is not None:
        raise UsageError(f"--cache-dir {str(cache_dir)!r}: {refused}: a library compiled there could be replaced "
                         "by another user (use a private cache directory)")
    with tempfile.TemporaryDirectory(dir=entry) as tmp:
        shim = Path(tmp) / "zlf_task_shim.cu"
        shim.write_text(SHIM)
        out = Path(tmp) / "candidate.so"
        cmd = [nvcc, *flags, f"-I{candidate.path.parent}", "-o", str(out), "-x", "cu", str(candidate.path), str(shim)]
        rc, text = _run_limited(cmd, timeout)
        output = "$ " + " ".join(cmd) + "\n" + text
        if rc is None:
            output = (f"error: nvcc did not finish within the compile time limit of {timeout:g} s (killed; "
                      "--compile-time-limit or metadata compile_time_limit_s raise it)\n" + output)
            return attrs.evolve(candidate, compile_failed=True, compile_output=output)
        if rc != 0:
            return attrs.evolve(candidate, compile_failed=True, compile_output=output)
        if not out.is_file() or out.stat().st_size == 0:
            output = ("error: nvcc exited with code 0 but wrote no library "
                      f"({'an empty file' if out.is_file() else 'no file'} at -o)\n" + output)
            return attrs.evolve(candidate, compile_failed=True, compile_output=output)
        (entry / "nvcc.log").write_text(output)
        (entry / HASH_FILE).write_text(_sha256(out) + "\n")
        os.replace(out, library)  # atomic: a concurrent judge sees no half-written library
    return attrs.evolve(candidate, library=str(library), compile_output=output)


#: the sha256 of a cached library, written when it was compiled
HASH_FILE = "candidate.so.sha256"


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def cache_refusal(cache_dir: Path, entry: Path, library: Optional[Path] = None) -> Optional[str]:
    """Why the cache (or a library in it) must not be trusted, or None: every folder from the
    cache directory down, and the library, must be owned by this user and writable by no one
    else, and the library's bytes must match the hash recorded when it was compiled."""
    uid = os.geteuid()
    for path in [cache_dir, entry] + ([library] if library is not None else []):
        try:
            st = os.lstat(path)
        except OSError as exc:
            return f"{path}: {exc.strerror or exc}"
        if os.path.islink(path):
            return f"{path} is a symbolic link"
        if st.st_uid != uid:
            return f"{path} is owned by uid {st.st_uid}, not this user ({uid})"
        if st.st_mode & 0o022:
            return f"{path} is writable by others (mode {st.st_mode & 0o777:o})"
    if library is not None:
        try:
            recorded = (entry / HASH_FILE).read_text().strip()
        except OSError:
            return "no recorded hash"
        if recorded != _sha256(library):
            return "its bytes do not match the hash recorded when it was compiled"
    return None


def _ctypes_arg(value):
    import torch

    if isinstance(value, torch.Tensor):
        return ctypes.c_void_p(value.data_ptr())
    if isinstance(value, bool) or isinstance(value, int):
        return ctypes.c_int64(int(value))
    if isinstance(value, float):
        return ctypes.c_double(value)
    if value is None:
        return ctypes.c_void_p(None)
    raise TypeError(f"cannot pass a {type(value).__name__} to a CUDA C++ run_kernel (tensors, ints and floats only)")


class CudaKernel:
    """``run_kernel`` of a compiled library; :meth:`bind` converts the arguments once, so the
    timed call costs one ctypes call."""

    def __init__(self, library: str):
        self.lib = ctypes.CDLL(library)
        try:
            self.fn = self.lib.run_kernel
        except AttributeError:
            raise ImportError('the library exports no run_kernel: declare it extern "C"') from None
        self.fn.restype = None
        self._last_error = self.lib.zlf_task_last_error
        self._last_error.argtypes = [ctypes.c_char_p, ctypes.c_int]
        self._last_error.restype = ctypes.c_int

    def bind(self, args):
        converted = [_ctypes_arg(a) for a in args]
        fn = self.fn
        return lambda: fn(*converted)

    def last_error(self) -> Optional[str]:
        """The CUDA runtime error left by the last launch in this library, or None."""
        buf = ctypes.create_string_buffer(256)
        code = self._last_error(buf, len(buf))
        return f"CUDA error {code}: {buf.value.decode(errors='replace')}" if code else None


class PythonKernel:
    """``run_kernel`` of a Python module, imported from its file (its folder importable, its own
    files found first: :func:`~zlf_taskpkg.package.folder_imports`)."""

    def __init__(self, path: Path):
        from .package import folder_imports

        spec = importlib.util.spec_from_file_location("zlf_task_candidate", path)
        module = importlib.util.module_from_spec(spec)
        sys.modules["zlf_task_candidate"] = module
        with folder_imports(path.parent):
            spec.loader.exec_module(module)
        fn = getattr(module, "run_kernel", None)
        if not callable(fn):
            raise ImportError(f"{path.name} defines no run_kernel(*args)")
        self.fn = fn

    def bind(self, args):
        fn, args = self.fn, tuple(args)
        return lambda: fn(*args)

    def last_error(self) -> Optional[str]:
        return None


def load_kernel(kind: str, path: str, library: Optional[str]):
    """Import or load the candidate in this (worker) process; raises on any failure."""
    return CudaKernel(library) if kind == KIND_CUDA else PythonKernel(Path(path))


def is_compile_error(exc: BaseException) -> bool:
    """A compiler rejected the candidate at its first call (Triton, TileLang ...)."""
    return any(c.__name__ in ("CompilationError", "CompileError") for c in type(exc).__mro__)
