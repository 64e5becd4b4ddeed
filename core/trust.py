"""What of a record (meta.json, campaign.json, results.jsonl) may become part of a process zlf
starts: a record is data, never a command, an environment or code.

A record may hand a new process only what zlf itself decides to replay: the seed, the shapes,
the replayed autotune choice, and the environment variables the run's own extensions declare as
mattering (their ``env_prefixes``) -- of those, only switches: never a variable that loads code
or names a place to load it from (``LD_PRELOAD``, ``PYTHONPATH``, ``TRITON_PTXAS_PATH``,
``TRITON_CACHE_DIR`` ...), and never a value that is a path or a shell construct. A file path
naming code (an op file) is imported only when the user names it on the command line.
"""
from __future__ import annotations

import re

from .redact import REDACTED

#: names that start a process differently or load code, whatever follows: the dynamic loader,
#: every interpreter's start-up variables, shells.
REFUSED_PREFIXES = ("LD_", "DYLD_", "PYTHON", "PERL", "RUBY", "NODE_", "JAVA_", "JDK_", "BASH_", "GCONV_", "GLIBC_",
                    "MALLOC_", "LIBGL_", "GIO_", "GTK_", "QT_", "SSL_", "OPENSSL_", "GIT_", "PIP_", "CONDA_", "VIRTUAL_ENV",
                    "NVCC_", "CLANG_", "GCC_", "LLVM_")
#: whole names that do.
REFUSED_NAMES = {"PATH", "ENV", "SHELL", "HOME", "IFS", "PS4", "PROMPT_COMMAND", "TMPDIR", "LOCPATH", "NLSPATH",
                 "HOSTALIASES", "RESOLV_HOST_CONF", "EDITOR", "VISUAL", "PAGER", "BROWSER", "ZLF_EXTENSIONS",
                 "ZLF_DISABLE", "CC", "CXX", "CPP", "FC", "AR", "AS", "NM", "LD", "HOSTCC", "HOSTCXX", "CUDAHOSTCXX", "CFLAGS", "CXXFLAGS", "LDFLAGS", "CPATH", "NVCC_PREPEND_FLAGS",
                 "NVCC_APPEND_FLAGS"}
#: parts of a name that say its value is code, a command or a place to load something from
#: (``CUDA_INJECTION64_PATH``, ``TRITON_PTXAS_PATH``, ``TRITON_CACHE_DIR``, ``CUDA_HOME``,
#: ``TRITON_OVERRIDE_DIR``, ``TORCH_EXTENSIONS_DIR``, ``ZLF_TASK_CACHE``).
REFUSED_PARTS = ("PRELOAD", "INJECTION", "PATH", "_DIR", "_HOME", "_ROOT", "_LIB", "_BIN", "_EXE", "_CMD",
                 "COMMAND", "PLUGIN", "_FILE", "CACHE", "OVERRIDE", "_PREFIX", "_SCRIPT", "_HOOK", "_MODULE",
                 "FLAGS", "_OPTIONS", "_OPTS", "_ARGS", "COMPILER", "LINKER")
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
#: a value that is a path, a URL or a shell construct.
_NOT_A_SWITCH = re.compile(r"[/\\~$`;|&<>(){}\n\r\0]|^\.|://")
#: a compiler option in a value that names a program or a library to run (``-ccbin=cc``,
#: ``--compiler-bindir cc``, ``-Bdir``, ``-fplugin=x.so``, ``-Xclang -load``, ``-fuse-ld=ld``).
_NAMES_A_PROGRAM = re.compile(r"(?:^|[\s,=])(?:-ccbin|--compiler-bindir|--linker|-B|-fplugin|-fpass-plugin|-load|-Xclang"
                              r"|-Xcompiler|-Xlinker|-Wl,|-fuse-ld|-specs|-wrapper|--?driver-mode)")


def refused_variable(name, value) -> str:
    """Why ``name=value`` from a record must not enter a process zlf starts, or '' when it may."""
    if not isinstance(name, str) or not _NAME.match(name):
        return "not a variable name"
    if not isinstance(value, str):
        return "not text"
    upper = name.upper()
    if upper.startswith(REFUSED_PREFIXES) or upper in REFUSED_NAMES:
        return "changes how a process starts or loads code"
    if any(part in upper for part in REFUSED_PARTS):
        return "names code or a place to load it from"
    if REDACTED in value:
        return "redacted in the record"
    if _NAMES_A_PROGRAM.search(value):
        return "its value is a compiler option naming a program"
    if _NOT_A_SWITCH.search(value) or len(value) > 256:
        return "its value is a path or a command, not a switch"
    return ""


def replayable_environment(recorded, prefixes) -> tuple:
    """``(variables, refused)``: of a record's environment, the switches a process may be given
    (their names start with one of ``prefixes``, the variables the run's extensions declare), and
    ``"NAME (why)"`` for each one it may not."""
    if not isinstance(recorded, dict):
        return {}, ([] if recorded is None else ["the recorded environment (not a mapping)"])
    prefixes = tuple(prefixes)
    ok, refused = {}, []
    for name, value in sorted(recorded.items(), key=lambda kv: str(kv[0])):
        why = refused_variable(name, value)
        if not why and not name.startswith(prefixes):
            why = "no extension of the run declares it"
        if why:
            refused.append(f"{name} ({why})")
        else:
            ok[name] = value
    return ok, refused


def names_code(spec) -> bool:
    """An op spec (or an option's value) that names a file to import or run: ``ops.py``,
    ``dir/ops.py::relu``, ``./kernels``, ``/abs/lib.so``."""
    if not isinstance(spec, str):
        return False
    import os

    path = spec.partition("::")[0]
    return (path.endswith((".py", ".so", ".pyc", ".pth", ".sh", ".cu", ".cpp")) or path.startswith(("/", "~", "."))
            or ((os.sep in path or "\\" in path) and os.path.exists(path)))


#: the field of a sealed document that holds its signature.
SIGNATURE = "signature"


def _digest(key: bytes, doc: dict) -> str:
    import hashlib
    import hmac
    import json

    body = json.dumps({k: v for k, v in doc.items() if k != SIGNATURE}, sort_keys=True, default=str)
    return hmac.new(key, body.encode(), hashlib.sha256).hexdigest()


def seal(doc: dict) -> dict:
    """``doc`` with a signature of this user's private key (the one ``zlf ab`` signs campaigns
    with): a state file whose fields become command lines (a sweep's) can then be told from one
    edited or made elsewhere. Without a key (an unwritable home) the document goes unsigned."""
    from .ab.campaign import signing_key

    key = signing_key(create=True)
    return {**doc, SIGNATURE: _digest(key, doc) if key else None}


def sealed_by_me(doc: dict) -> bool:
    """True when ``doc`` carries this user's signature of exactly its fields (:func:`seal`)."""
    import hmac

    from .ab.campaign import signing_key

    key = signing_key(create=False)
    signature = doc.get(SIGNATURE) if isinstance(doc, dict) else None
    return bool(key) and isinstance(signature, str) and hmac.compare_digest(signature, _digest(key, doc))
