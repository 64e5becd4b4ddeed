"""Feeding ``on_compile`` / ``on_launch`` from Triton's hooks, whatever the Triton version.

The hook API differs by version (detect, don't assume):
- 3.5+: ``triton.knobs.runtime.launch_enter_hook`` is a HookChain (``.add`` / ``.remove``);
- 3.4: the same attribute is a single callable;
- <=3.3 and the 3.1-based vendor forks: class attributes ``CompiledKernel.launch_enter_hook``.
The compilation listener (``knobs.compilation.listener``, 3.4+) is a single callable: we chain
to whatever was installed before us and restore it on removal.
"""
from __future__ import annotations

import contextlib
import logging
from typing import Callable, Optional

from .records import CompileEvent, LaunchEvent

log = logging.getLogger("zlf")


def hook_api() -> str:
    """``chain`` (3.5+), ``knob`` (3.4), ``class`` (<=3.3) or ``none`` (no Triton)."""
    try:
        import triton
    except Exception:
        return "none"
    knobs = getattr(triton, "knobs", None)
    if knobs is None:
        return "class"
    return "chain" if hasattr(knobs.runtime.launch_enter_hook, "add") else "knob"


def _specialization(src) -> dict:
    """Per-argument attributes from an ASTSource: ``{"EM": "D"}`` for divisible by 16."""
    out = {}
    try:
        names = list(src.fn.arg_names)
        for key, attrs_ in (getattr(src, "attrs", None) or {}).items():
            idx = key[0] if isinstance(key, tuple) else key
            for attr in attrs_:
                if attr and attr[0] == "tt.divisibility" and idx < len(names):
                    out[names[idx]] = f"D{attr[1]}" if attr[1] != 16 else "D"
    except Exception:  # Triton-internal layout changed: specialization is optional information
        pass
    return out


def _constants(src) -> dict:
    consts = {}
    try:
        names = list(src.fn.arg_names)
        for key, value in (getattr(src, "constants", None) or {}).items():
            idx = key[0] if isinstance(key, tuple) else key
            name = names[idx] if isinstance(idx, int) and idx < len(names) else str(key)
            consts[name] = value if isinstance(value, (int, float, bool, str)) or value is None else str(value)
    except Exception:
        pass
    return consts


def compile_event(src, metadata, metadata_group, cache_hit) -> CompileEvent:
    md = metadata if isinstance(metadata, dict) else {}
    sig = {}
    try:
        sig = {k if isinstance(k, str) else str(k): str(v) for k, v in (src.signature or {}).items()}
    except Exception:
        pass
    asm = {}
    for fname, path in (metadata_group or {}).items():
        kind = fname.rsplit(".", 1)[-1]
        asm[kind] = path
    return CompileEvent(
        name=md.get("name") or getattr(getattr(src, "fn", None), "__name__", "?"),
        hash=md.get("hash", ""),
        num_warps=md.get("num_warps"),
        num_stages=md.get("num_stages"),
        num_ctas=md.get("num_ctas"),
        maxnreg=md.get("maxnreg"),
        constants=_constants(src),
        signature=sig,
        specialization=_specialization(src),
        asm_paths=asm,
        target=str(md.get("target", "")),
        cache_hit=bool(cache_hit),
        source_fn=getattr(src, "fn", None),
        raw=md,
    )


class CompilerHooks:
    """Installed compile listener plus an on-demand launch hook (see :meth:`launch_window`)."""

    def __init__(self, on_compile: Optional[Callable], on_launch: Optional[Callable]):
        self.api = hook_api()
        self.on_compile = on_compile
        self.on_launch = on_launch
        self._previous_listener = None
        self._listener = None
        self._point = None

    def install(self) -> "CompilerHooks":
        if self.on_compile is not None and self.api in ("chain", "knob"):
            from triton import knobs

            previous = knobs.compilation.listener

            def listener(*, src, metadata, metadata_group, times, cache_hit):
                if previous is not None:
                    previous(src=src, metadata=metadata, metadata_group=metadata_group, times=times, cache_hit=cache_hit)
                try:
                    self.on_compile(compile_event(src, metadata, metadata_group, cache_hit))
                except Exception:  # an observer must never break the compile it observes
                    log.exception("on_compile hook failed")

            self._previous_listener, self._listener = previous, listener
            knobs.compilation.listener = listener
        return self

    def remove(self) -> None:
        if self._listener is not None:
            from triton import knobs

            if knobs.compilation.listener is self._listener:
                knobs.compilation.listener = self._previous_listener
            self._listener = None

    def _launch_hook(self, metadata):
        try:
            data = metadata.get() if hasattr(metadata, "get") and callable(metadata.get) else dict(metadata)
            self.on_launch(LaunchEvent(name=data.get("name", "?"), function=data.get("function"), point=self._point, raw=data))
        except Exception:
            log.exception("on_launch hook failed")

    @contextlib.contextmanager
    def launch_window(self, point_id: Optional[str] = None):
        """Report launches only inside this block: a hook in the timed loop would inflate it."""
        if self.on_launch is None or self.api == "none":
            yield
            return
        self._point = point_id
        hook = self._launch_hook
        if self.api == "chain":
            from triton import knobs

            knobs.runtime.launch_enter_hook.add(hook)
            try:
                yield
            finally:
                knobs.runtime.launch_enter_hook.remove(hook)
        elif self.api == "knob":
            from triton import knobs

            previous = knobs.runtime.launch_enter_hook

            def chained(md):
                if previous is not None:
                    previous(md)
                hook(md)

            knobs.runtime.launch_enter_hook = chained
            try:
                yield
            finally:
                knobs.runtime.launch_enter_hook = previous
        else:
            from triton.compiler.compiler import CompiledKernel

            previous = CompiledKernel.launch_enter_hook

            def chained(md):
                if previous is not None:
                    previous(md)
                hook(md)

            CompiledKernel.launch_enter_hook = chained
            try:
                yield
            finally:
                CompiledKernel.launch_enter_hook = previous
        self._point = None


def install(on_compile, on_launch) -> CompilerHooks:
    return CompilerHooks(on_compile, on_launch).install()
