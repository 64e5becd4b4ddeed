"""``python -P -m zlf_ir_dump.fresh ir ARGS``: the fresh process ``zlf ir`` runs in when Triton is
interpreted in its caller's (:func:`zlf_ir_dump.aot._in_a_fresh_process`).

It is ``zlf ARGS`` with the caller's in-process extensions (``zlf.cli.main(argv,
extra_plugins=...)``) registered as they were there. They come on stdin from the process that
started this one (only that one: :data:`~zlf_ir_dump.aot.FRESH` names it), one JSON object::

    {"path": [the caller's sys.path], "plugins": [[name, base64 of the plugin pickled], ...],
     "modules": {module of a plugin's class: the file the caller imported it from, ...}}

Each plugin is pickled with cloudpickle, which takes a class defined in the caller's script
(``__main__``) along by value and one from a module by reference; the caller's ``sys.path`` is
appended to this process's own (never put before it: ``-P`` keeps the working directory off the
front), so that such a module imports here as it did there. Where this process would import that
module from another file than the caller did (another copy earlier on the path), the module is
imported from the caller's file for that name alone (or refused where that cannot be, a module
in a package), not rebuilt from another copy's code. A plugin holding an open file is refused too:
cloudpickle would send a copy of what is left to read, not the file. A plugin here is a copy:
what its hooks return counts, what they change in the plugin stays in this process.
"""
from __future__ import annotations

import base64
import inspect
import io
import json
import os
import pickle
import sys


def pack(plugins) -> str:
    """What :func:`main` reads: ``(name, plugin)`` pairs and this process's ``sys.path``; a plugin
    that cannot be pickled raises ``ValueError`` naming it."""
    packed, modules = [], {}
    for name, plugin in plugins:
        try:
            blob = _dumps(plugin)
        except Exception as exc:  # anything a plugin's state raises while pickled (a lock, a socket)
            raise ValueError(f"extension {name!r} passed to main(): {_one_line(exc)}") from exc
        packed.append([name, base64.b64encode(blob).decode("ascii")])
        module = sys.modules.get(plugin.__name__ if inspect.ismodule(plugin) else type(plugin).__module__)
        if module is not None and module.__name__ != "__main__" and getattr(module, "__file__", None):
            modules[module.__name__] = module.__file__
    return json.dumps({"path": list(sys.path), "plugins": packed, "modules": modules})


def _dumps(plugin) -> bytes:
    """``plugin`` pickled with cloudpickle; an open file in it raises ``TypeError``."""
    import cloudpickle

    class Pickler(cloudpickle.Pickler):
        def reducer_override(self, obj):
            if isinstance(obj, io.IOBase) and not isinstance(obj, (io.StringIO, io.BytesIO)):
                raise TypeError(f"cannot take along an open file ({getattr(obj, 'name', type(obj).__name__)!r})")
            return super().reducer_override(obj)

    out = io.BytesIO()
    Pickler(out, protocol=pickle.HIGHEST_PROTOCOL).dump(plugin)
    return out.getvalue()


def unpack(text: str) -> list:
    """The ``(name, plugin)`` pairs :func:`pack` made, the caller's ``sys.path`` appended first;
    a plugin that cannot be rebuilt here raises ``ValueError`` naming it."""
    sent = json.loads(text)
    sys.path.extend(p for p in sent.get("path", ()) if isinstance(p, str) and p not in sys.path)
    plugins = []
    try:
        _check_modules(sent.get("modules") or {})
    except KeyboardInterrupt:
        raise
    except ValueError:
        raise
    except BaseException as exc:  # the caller's module failed to import here (a sys.exit in it)
        raise ValueError(f"an extension passed to main() cannot be rebuilt in the fresh process: {_one_line(exc)}") from exc
    for name, blob in sent.get("plugins", ()):
        try:
            plugins.append((name, pickle.loads(base64.b64decode(blob))))
        except KeyboardInterrupt:
            raise
        except BaseException as exc:  # a module the caller imported that this process cannot; a sys.exit in it
            raise ValueError(f"extension {name!r} passed to main() cannot be rebuilt in the fresh process: "
                             f"{_one_line(exc)}") from exc
    return plugins


def _check_modules(modules: dict) -> None:
    """Each plugin module the caller used is imported from the file the caller imported it from:
    where this process would find another copy first for its name, that one module is imported
    from the caller's file (the caller's order, for it alone); where that cannot be (a module
    inside a package, one this process has imported already), ``ValueError`` naming both."""
    import importlib.util

    for name, there in modules.items():
        if not isinstance(name, str) or not isinstance(there, str):
            continue
        if name in sys.modules:
            here = getattr(sys.modules[name], "__file__", None)
        else:
            try:
                spec = importlib.util.find_spec(name)
            except KeyboardInterrupt:
                raise
            except BaseException:  # a parent package that fails to import: unpickling says so
                continue
            here = spec.origin if spec is not None else None
        if here is not None and os.path.realpath(here) == os.path.realpath(there):
            continue
        if "." not in name and name not in sys.modules and os.path.isfile(there):
            package = [os.path.dirname(there)] if os.path.basename(there) == "__init__.py" else None
            spec = importlib.util.spec_from_file_location(name, there, submodule_search_locations=package)
            if spec is not None and spec.loader is not None:
                module = importlib.util.module_from_spec(spec)
                sys.modules[name] = module
                try:
                    spec.loader.exec_module(module)
                except BaseException:
                    sys.modules.pop(name, None)
                    raise
                continue
        raise ValueError(f"module {name!r} of an extension passed to main() is {there!r} in the caller, but the "
                         f"fresh process would import {here or 'nothing'!r}: run zlf ir before Triton is imported "
                         "interpreted, or install the extension as an entry point")


def _one_line(exc: BaseException) -> str:
    from zlf.errors import one_line

    return one_line(exc)


def main() -> int:
    from zlf import UsageError
    from zlf.cli import guarded, main as zlf_main

    from .aot import FRESH, _is_the_fresh_process

    plugins: list = []
    if _is_the_fresh_process():
        del os.environ[FRESH]  # this process's alone: none of its children is the fresh process
        sent = sys.stdin.read()
        devnull = os.open(os.devnull, os.O_RDONLY)  # the command's stdin, as before: nothing to read
        os.dup2(devnull, 0)
        os.close(devnull)
        if sent.strip():
            def load() -> int:
                try:
                    plugins.extend(unpack(sent))
                except ValueError as exc:
                    raise UsageError(str(exc)) from exc
                return 0

            code = guarded(load)
            if code:
                return code
    return zlf_main(extra_plugins=plugins)


if __name__ == "__main__":
    sys.exit(main())
