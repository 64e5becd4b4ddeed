"""``python -P -m zlf_ir_dump.fresh ir ARGS``: the fresh process ``zlf ir`` runs in when Triton is
interpreted in its caller's (:func:`zlf_ir_dump.aot._in_a_fresh_process`).

It is ``zlf ARGS`` with the caller's in-process extensions (``zlf.cli.main(argv,
extra_plugins=...)``) registered as they were there. They come on stdin from the process that
started this one (only that one: :data:`~zlf_ir_dump.aot.FRESH` names it), one JSON object::

    {"path": [the caller's sys.path], "plugins": [[name, base64 of the plugin pickled], ...]}

Each plugin is pickled with cloudpickle, which takes a class defined in the caller's script
(``__main__``) along by value and one from a module by reference; the caller's ``sys.path`` is
appended to this process's own (never put before it: ``-P`` keeps the working directory off the
front), so that such a module imports here as it did there. A plugin here is a copy: what its
hooks return counts, what they change in the plugin stays in this process.
"""
from __future__ import annotations

import base64
import json
import os
import pickle
import sys


def pack(plugins) -> str:
    """What :func:`main` reads: ``(name, plugin)`` pairs and this process's ``sys.path``; a plugin
    that cannot be pickled raises ``ValueError`` naming it."""
    import cloudpickle

    packed = []
    for name, plugin in plugins:
        try:
            blob = cloudpickle.dumps(plugin)
        except Exception as exc:  # anything a plugin's state raises while pickled (a lock, a socket)
            raise ValueError(f"extension {name!r} passed to main(): {_one_line(exc)}") from exc
        packed.append([name, base64.b64encode(blob).decode("ascii")])
    return json.dumps({"path": list(sys.path), "plugins": packed})


def unpack(text: str) -> list:
    """The ``(name, plugin)`` pairs :func:`pack` made, the caller's ``sys.path`` appended first;
    a plugin that cannot be rebuilt here raises ``ValueError`` naming it."""
    sent = json.loads(text)
    sys.path.extend(p for p in sent.get("path", ()) if isinstance(p, str) and p not in sys.path)
    plugins = []
    for name, blob in sent.get("plugins", ()):
        try:
            plugins.append((name, pickle.loads(base64.b64decode(blob))))
        except Exception as exc:  # a module the caller imported that this process cannot
            raise ValueError(f"extension {name!r} passed to main() cannot be rebuilt in the fresh process: "
                             f"{_one_line(exc)}") from exc
    return plugins


def _one_line(exc: BaseException) -> str:
    from zlf.errors import one_line

    return one_line(exc)


def main() -> int:
    from zlf import UsageError
    from zlf.cli import guarded, main as zlf_main

    from .aot import _is_the_fresh_process

    plugins: list = []
    if _is_the_fresh_process():
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
