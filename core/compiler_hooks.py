"""Feeding ``on_compile`` / ``on_launch`` from Triton's hooks, whatever the Triton version.

The hook API differs by version (detect, don't assume):
- 3.5+: ``triton.knobs.runtime.launch_enter_hook`` / ``kernel_load_end_hook`` are HookChains
  (``.add`` / ``.remove``; assigning would drop other users such as proton);
- 3.4: the same attributes are single callables: we chain to the previous one and restore it;
- <=3.3 and the 3.1-based vendor forks: class attributes ``CompiledKernel.launch_enter_hook``
  and no compile listener: compiles are seen by wrapping ``CompiledKernel.__init__``.
The compilation listener (``knobs.compilation.listener``, 3.4+) is a single callable: we chain
to whatever was installed before us and restore it on removal.

Launches are mapped to compiled variants (cache hash) through the kernel-load hook, which fires
once per compiled kernel per process with its device function handle; the launch hook only
carries that handle.
"""
from __future__ import annotations

import contextlib
import logging
from typing import Callable, Optional

from . import readers
from .records import CompileEvent, LaunchEvent
from .triton_tuner import Sweeps

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


def _arg_index(key) -> Optional[int]:
    idx = key[0] if isinstance(key, tuple) and len(key) == 1 else key
    return idx if isinstance(idx, int) else None


def _declared_constexprs(src) -> Optional[set]:
    """Indices of parameters declared ``tl.constexpr`` (others in ``constants`` were folded);
    None when the Triton build does not say."""
    try:
        return set(src.fn.constexprs)
    except Exception:
        return None


def _specialization(src) -> dict:
    """Per-argument specialization from an ASTSource: ``{"EM": "D"}`` for divisible by 16
    (``"D8"`` for another divisor), ``{"stride_cn": "=1"}`` for an int folded because it was 1."""
    out = {}
    try:
        names = list(src.fn.arg_names)
        for key, attrs_ in (getattr(src, "attrs", None) or {}).items():
            idx = _arg_index(key)
            for attr in attrs_:
                if attr and attr[0] == "tt.divisibility" and idx is not None and idx < len(names):
                    out[names[idx]] = f"D{attr[1]}" if attr[1] != 16 else "D"
        declared = _declared_constexprs(src)
        for key, value in (getattr(src, "constants", None) or {}).items():
            idx = _arg_index(key)
            if idx is not None and idx < len(names) and declared is not None and idx not in declared:
                out[names[idx]] = f"={value}"
    except Exception:  # Triton-internal layout changed: specialization is optional information
        pass
    return out


def _constants(src) -> dict:
    """Values of the declared constexpr parameters, in argument order."""
    consts = {}
    try:
        names = list(src.fn.arg_names)
        declared = _declared_constexprs(src)
        for key, value in sorted((getattr(src, "constants", None) or {}).items(), key=lambda kv: str(kv[0])):
            idx = _arg_index(key)
            if idx is not None and declared is not None and idx not in declared:
                continue  # a folded specialization (int == 1), reported in ``specialization``
            name = names[idx] if idx is not None and idx < len(names) else str(key)
            consts[name] = value if isinstance(value, (int, float, bool, str)) or value is None else str(value)
        order = {n: i for i, n in enumerate(names)}
        consts = dict(sorted(consts.items(), key=lambda kv: order.get(kv[0], len(order))))
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


def _metadata_from_group(metadata_group) -> dict:
    for fname, path in (metadata_group or {}).items():
        if fname.endswith(".json"):
            try:
                return readers.read_json(path, what="Triton metadata")
            except (OSError, ValueError, readers.BadFile):
                return {}
    return {}


class CompilerHooks:
    """Installed compile listener and kernel-load hook, plus an on-demand launch hook (see
    :meth:`launch_window`)."""

    def __init__(self, on_compile: Optional[Callable], on_launch: Optional[Callable]):
        self.api = hook_api()
        self.on_compile = on_compile
        self.on_launch = on_launch
        self._undo: list = []
        self._point = None
        self._hash_of_function: dict = {}
        self._sweeps = Sweeps()

    # ------------------------------------------------------------------ install / remove
    def install(self) -> "CompilerHooks":
        if self.api == "none":
            return self
        if self.on_compile is not None:
            if self.api in ("chain", "knob"):
                self._install_listener()
            else:
                self._install_class_compile_hook()
        if self.on_launch is not None:
            self._install_load_hook()
        return self

    def remove(self) -> None:
        while self._undo:
            undo = self._undo.pop()
            try:
                undo()
            except Exception:
                log.exception("removing a compiler hook failed")

    def _emit_compile(self, src, metadata, metadata_group, cache_hit) -> None:
        try:
            self.on_compile(compile_event(src, metadata, metadata_group, cache_hit))
        except Exception:  # an observer must never break the compile it observes
            log.exception("on_compile hook failed")

    def _install_listener(self) -> None:
        from triton import knobs

        previous = knobs.compilation.listener

        def listener(*, src, metadata, metadata_group, times, cache_hit):
            if previous is not None:
                previous(src=src, metadata=metadata, metadata_group=metadata_group, times=times, cache_hit=cache_hit)
            self._emit_compile(src, metadata, metadata_group, cache_hit)

        knobs.compilation.listener = listener

        def undo():
            if knobs.compilation.listener is listener:
                knobs.compilation.listener = previous

        self._undo.append(undo)

    def _install_class_compile_hook(self) -> None:
        # <=3.3 has no listener; every compiled (or disk-cached) kernel becomes a CompiledKernel.
        from triton.compiler.compiler import CompiledKernel

        original = CompiledKernel.__init__

        def __init__(kernel, src, metadata_group, hash, *a, **kw):
            original(kernel, src, metadata_group, hash, *a, **kw)
            md = _metadata_from_group(metadata_group)
            md.setdefault("hash", hash)
            self._emit_compile(src, md, metadata_group, cache_hit=None)

        CompiledKernel.__init__ = __init__

        def undo():
            if CompiledKernel.__init__ is __init__:
                CompiledKernel.__init__ = original

        self._undo.append(undo)

    def _load_hook(self, module, function, name, metadata_group, hash) -> None:
        if function is not None:
            self._hash_of_function[function] = hash

    def _install_load_hook(self) -> None:
        """Map device function handles to cache hashes for the whole run (fires once per kernel)."""
        if self.api == "chain":
            from triton import knobs

            chain = getattr(knobs.runtime, "kernel_load_end_hook", None)
            if chain is not None and hasattr(chain, "add"):
                chain.add(self._load_hook)
                self._undo.append(lambda: chain.remove(self._load_hook))
        elif self.api == "knob":
            from triton import knobs

            if not hasattr(knobs.runtime, "kernel_load_end_hook"):
                return
            previous = knobs.runtime.kernel_load_end_hook

            def chained(*args):
                if previous is not None:
                    previous(*args)
                self._load_hook(*args)

            knobs.runtime.kernel_load_end_hook = chained

            def undo():
                if knobs.runtime.kernel_load_end_hook is chained:
                    knobs.runtime.kernel_load_end_hook = previous

            self._undo.append(undo)
        else:
            from triton.compiler.compiler import CompiledKernel

            original = getattr(CompiledKernel, "_init_handles", None)
            if original is None:
                return

            def _init_handles(kernel, *a, **kw):
                result = original(kernel, *a, **kw)
                self._load_hook(None, getattr(kernel, "function", None), kernel.name, None, kernel.hash)
                return result

            CompiledKernel._init_handles = _init_handles

            def undo():
                if CompiledKernel._init_handles is _init_handles:
                    CompiledKernel._init_handles = original

            self._undo.append(undo)

    # ------------------------------------------------------------------ launches
    def _launch_hook(self, metadata):
        try:
            data = metadata.get() if hasattr(metadata, "get") and callable(metadata.get) else dict(metadata)
            function = data.get("function")
            self.on_launch(LaunchEvent(
                name=data.get("name", "?"), hash=self._hash_of_function.get(function, ""), function=function,
                point=self._point, raw=data, in_autotune=self._sweeps.active,
            ))
        except Exception:
            log.exception("on_launch hook failed")

    @contextlib.contextmanager
    def _launch_hook_installed(self):
        hook = self._launch_hook
        if self.api == "chain":
            from triton import knobs

            knobs.runtime.launch_enter_hook.add(hook)
            try:
                yield
            finally:
                knobs.runtime.launch_enter_hook.remove(hook)
            return
        if self.api == "knob":
            from triton import knobs

            holder, attr = knobs.runtime, "launch_enter_hook"
        else:
            from triton.compiler.compiler import CompiledKernel

            holder, attr = CompiledKernel, "launch_enter_hook"
        previous = getattr(holder, attr)

        def chained(md):
            if previous is not None:
                previous(md)
            hook(md)

        setattr(holder, attr, chained)
        try:
            yield
        finally:
            setattr(holder, attr, previous)

    @contextlib.contextmanager
    def launch_window(self, point_id: Optional[str] = None):
        """Report launches only inside this block: a hook in the timed loop would inflate it."""
        if self.on_launch is None or self.api == "none":
            yield
            return
        self._point = point_id
        try:
            with self._sweeps.watched(), self._launch_hook_installed():
                yield
        finally:
            self._point = None


def install(on_compile, on_launch) -> CompilerHooks:
    return CompilerHooks(on_compile, on_launch).install()
