"""atk44a's stand-in library backend: libfake's clock (tests/library_ext), plus a way for an op
to fire Triton-like compile events (``compile_now``), so a campaign's later-round compile marking
can be checked on the CPU."""
from __future__ import annotations

from types import SimpleNamespace

import zlf_test_library as lib
from zlf import hookimpl
from zlf.compiler_hooks import CompilerHooks
from zlf.testing import fake_backend_class

_HOOK = []


def compile_now(n: int = 1, cache_hit: bool = False) -> None:
    """Tell the running process that ``n`` kernels were compiled (or loaded from its cache)."""
    for _ in range(n):
        for cb in _HOOK:
            cb(SimpleNamespace(cache_hit=cache_hit, name="atk_kernel"))


_Base = fake_backend_class("atkfake", clock=lib.CLOCK)


class AtkBackend(_Base):
    def install_compiler_hooks(self, on_compile, on_launch):
        if on_compile is not None:
            _HOOK.append(on_compile)
        return CompilerHooks(None, None)


AtkBackend.name = "atkfake"


class AtkLibrary:
    @hookimpl
    def register_backends(self):
        return [AtkBackend]
