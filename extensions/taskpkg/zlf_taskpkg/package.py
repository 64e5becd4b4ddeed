"""A contest task package (docs/taskpkg.md): its problem module, its metadata, its cases.

Accepted unchanged::

    PKG_DIR/
      problem.py            the problem module (or the one top-level *.py defining genTestCase):
                            getNumOfTestcases, getTestCaseSize, genTestCase, baseline, check
      meta.json             optional metadata (also metadata.json, problem.json, task.json,
                            meta.yaml, problem.yaml)

Metadata keys read, all optional: ``name``, ``rtol``, ``atol``, ``seed`` (base seed),
``outputs`` (indices of the arguments the kernel writes), ``time_limit_s``,
``compile_time_limit_s``. Other keys are kept
in meta.json and ignored.
"""
from __future__ import annotations

import contextlib
import importlib.util
import io
import os
import re
import sys
from pathlib import Path
from typing import Optional

import attrs

from zlf import UsageError, readers
from zlf.rundir import safe_name

PROBLEM_FUNCTIONS = ("getNumOfTestcases", "getTestCaseSize", "genTestCase", "baseline", "check")
METADATA_FILES = ("meta.json", "metadata.json", "problem.json", "task.json", "meta.yaml", "problem.yaml")
#: module attributes a package may use for its base seed (case seed = base + case number).
SEED_ATTRIBUTES = ("SEED", "BASE_SEED", "seed", "base_seed")


def _find_problem_module(root: Path) -> Path:
    preferred = root / "problem.py"
    if preferred.is_file():
        return preferred
    found = [p for p in sorted(root.glob("*.py")) if re.search(r"^def\s+genTestCase\b", p.read_text(errors="replace"), re.M)]
    if len(found) == 1:
        return found[0]
    if not found:
        raise UsageError(f"task package {str(root)!r}: no problem module (problem.py, or a *.py defining genTestCase)")
    names = ", ".join(p.name for p in found)
    raise UsageError(f"task package {str(root)!r}: several modules define genTestCase ({names}); name one problem.py")


@contextlib.contextmanager
def no_exit(what: str):
    """While the judge's own process runs package code: ``os._exit`` and ``sys.exit`` are a
    one-line error naming ``what``, not the judge vanishing without a word."""
    real = os._exit

    def refuse(code=0):
        raise UsageError(f"{what} called os._exit({code!r}): a task package must not exit the judge")

    os._exit = refuse
    try:
        yield
    except SystemExit as exc:
        raise UsageError(f"{what} called sys.exit({exc.code!r}): a task package must not exit the judge") from None
    finally:
        os._exit = real


@contextlib.contextmanager
def folder_imports(folder):
    """While a package's (or a candidate's) module is imported: its folder leads ``sys.path``, as
    a script's folder does, and a module loaded already under a name this folder answers (its
    ``helpers``) from anywhere but the interpreter's own library and its environment's
    site-packages (another package's or candidate's folder, a ``PYTHONPATH`` entry) is dropped
    from ``sys.modules``, so that the imports find this folder's own files. The standard library's
    and the environment's modules are never dropped (a ``json.py`` or ``torch/`` there evicts
    nothing of the judge's). Afterwards the folder goes to the end of ``sys.path``: importable for
    imports made when its functions run, never ahead of the standard library or the environment
    (a candidate's ``csv.py`` is not the judge's next ``import csv``)."""
    folder = os.path.realpath(folder)
    inside = folder.rstrip(os.sep) + os.sep
    kept = _installed_folders()

    def clashing(module) -> bool:
        file = getattr(module, "__file__", None)
        if not isinstance(file, str) or not os.path.isabs(file):
            return False  # built in, a namespace, or made up (torch.ops): no folder's file
        file = os.path.realpath(file)
        return not file.startswith(inside) and not any(file.startswith(k) for k in kept)

    def own(name: str) -> bool:
        """The folder answers this module name: its top level is a module or package there (not
        an environment that happens to lie below the folder: its torch is no file of the folder)."""
        top = os.path.join(folder, name.partition(".")[0])
        return os.path.isfile(top + ".py") or os.path.isfile(os.path.join(top, "__init__.py"))

    for name in [n for n, module in list(sys.modules.items()) if own(n) and clashing(module)]:
        del sys.modules[name]  # the module that imported it keeps it
    with contextlib.suppress(ValueError):
        sys.path.remove(folder)
    sys.path.insert(0, folder)
    try:
        yield
    finally:
        with contextlib.suppress(ValueError):
            sys.path.remove(folder)
        sys.path.append(folder)


def _installed_folders() -> tuple:
    """The interpreter's standard library and the environment's site-packages (real paths, each
    with a trailing separator): the modules loaded from there are the judge's own."""
    import site
    import sysconfig

    paths = {sysconfig.get_paths().get(k) for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    paths.update(getattr(site, "getsitepackages", lambda: [])())
    paths.add(getattr(site, "getusersitepackages", lambda: None)())
    for base in {sys.prefix, sys.base_prefix, sys.exec_prefix}:
        paths.update(sysconfig.get_paths(vars={"base": base, "platbase": base, "installed_base": base,
                                               "installed_platbase": base}).get(k) for k in ("stdlib", "platstdlib",
                                                                                                  "purelib", "platlib"))
    return tuple(os.path.realpath(p).rstrip(os.sep) + os.sep for p in paths if p)


def _load_metadata(root: Path) -> tuple:
    """The package's metadata (JSON or YAML) through zlf's bounded reader: a regular file of
    limited size, strict UTF-8, finite numbers, bounded nesting and YAML expansion; else one line."""
    for name in METADATA_FILES:
        path = root / name
        if not path.is_file():
            continue
        what = "task package metadata"
        data = readers.read_json(path, what=what) if name.endswith(".json") else readers.read_yaml(path, what=what)
        if not isinstance(data, dict):
            raise UsageError(f"task package metadata {str(path)!r} must be a mapping")
        return data, path
    return {}, None


def parse_cases(text: Optional[str], total: int) -> list:
    """``"1,3-5"`` → ``[1, 3, 4, 5]`` (1-based, as the package numbers its cases); None → all."""
    if not text:
        return list(range(1, total + 1))
    cases = []
    for part in text.split(","):
        part = part.strip()
        m = re.fullmatch(r"(\d+)(?:-(\d+))?", part)
        if not m:
            raise UsageError(f"--cases {text!r}: expected numbers and ranges such as 1,3-5")
        lo, hi = int(m.group(1)), int(m.group(2) or m.group(1))
        if lo < 1 or hi > total or lo > hi:
            raise UsageError(f"--cases {text!r}: the package has cases 1-{total}")
        cases.extend(k for k in range(lo, hi + 1) if k not in cases)
    return cases


def shape_of(entry) -> tuple:
    """One entry of ``arg_shapes`` as a tuple of ints (``()`` for a scalar argument)."""
    if isinstance(entry, int):
        return (entry,)
    return tuple(int(d) for d in entry)


@attrs.define
class TaskPackage:
    """A task package on disk; :meth:`load` imports its problem module in this process."""

    root: Path
    module_path: Path
    meta: dict
    meta_path: Optional[Path]
    module: object = None

    @classmethod
    def open(cls, path) -> "TaskPackage":
        root = Path(path).resolve()
        if not root.is_dir():
            raise UsageError(f"task package {str(path)!r} is not a directory")
        meta, meta_path = _load_metadata(root)
        return cls(root=root, module_path=_find_problem_module(root), meta=meta, meta_path=meta_path)

    @property
    def name(self) -> str:
        name = str(self.meta.get("name") or self.root.name)
        return safe_name(name, "task")

    def load(self):
        """Import the problem module (once); the package folder is importable, for its helpers
        (:func:`folder_imports`)."""
        if self.module is not None:
            return self.module
        modname = "zlf_task_problem_" + re.sub(r"\W", "_", self.root.name)
        spec = importlib.util.spec_from_file_location(modname, self.module_path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[modname] = module
        try:
            with no_exit(f"problem module {str(self.module_path)!r}"), folder_imports(self.root):
                spec.loader.exec_module(module)
        except UsageError:
            raise
        except Exception as exc:
            raise UsageError(f"problem module {str(self.module_path)!r} failed to import: {type(exc).__name__}: {exc}") from exc
        missing = [f for f in PROBLEM_FUNCTIONS if not callable(getattr(module, f, None))]
        if missing:
            raise UsageError(f"problem module {str(self.module_path)!r} lacks {', '.join(missing)} (docs/taskpkg.md)")
        self.module = module
        return module

    def num_cases(self) -> int:
        try:
            with no_exit(f"{self.module_path.name}: getNumOfTestcases()"):
                n = self.load().getNumOfTestcases()
        except UsageError:
            raise
        except Exception as exc:
            raise UsageError(f"{self.module_path.name}: getNumOfTestcases() raised {type(exc).__name__}: {exc}") from exc
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise UsageError(f"{self.module_path.name}: getNumOfTestcases() returned {n!r}, not a positive int")
        return n

    def case_sizes(self, case: int) -> tuple:
        """``(shapes, arg_shapes, warmup, iters)`` of one case: the case number is fed on standard
        input, as the package expects. ``arg_shapes`` is what the package returned (handed back to
        genTestCase and check unchanged), ``shapes`` the same as int tuples; ``warmup``/``iters``
        are None when the package gives none."""
        module = self.load()
        saved = sys.stdin
        sys.stdin = io.TextIOWrapper(io.BytesIO(f"{case}\n".encode()))
        try:
            with no_exit(f"{self.module_path.name}: getTestCaseSize()"):
                result = module.getTestCaseSize()
        finally:
            sys.stdin = saved
        warmup = iters = None
        if (isinstance(result, (tuple, list)) and len(result) == 2 and isinstance(result[1], (tuple, list))
                and len(result[1]) == 2 and all(isinstance(v, int) for v in result[1])):
            arg_shapes, (warmup, iters) = result
        else:
            arg_shapes = result
        return [shape_of(s) for s in arg_shapes], arg_shapes, warmup, iters

    def base_seed(self) -> int:
        if isinstance(self.meta.get("seed"), int):
            return self.meta["seed"]
        module = self.load()
        for attr in SEED_ATTRIBUTES:
            value = getattr(module, attr, None)
            if isinstance(value, int) and not isinstance(value, bool):
                return value
        return 0

    def declared_outputs(self) -> Optional[list]:
        value = self.meta.get("outputs", getattr(self.load(), "OUTPUTS", None))
        if value is None:
            return None
        items = [value] if isinstance(value, int) else list(value)
        if not all(isinstance(i, int) for i in items):
            raise UsageError(f"task package {self.name!r}: outputs must be argument indices, got {value!r}")
        return items

    def tolerances(self, rtol=None, atol=None) -> dict:
        """Keyword tolerances for ``check``: the command line's, else the metadata's, else none
        (the check's own defaults apply)."""
        out = {}
        for key, given in (("rtol", rtol), ("atol", atol)):
            value = given if given is not None else self.meta.get(key)
            if value is not None:
                out[key] = self._number(key, value, from_meta=given is None, allow_zero=True)
        return out

    def limit(self, key: str, given=None, default: float = 60.0) -> float:
        """A time limit in seconds: the command line's, else the metadata's ``key``, else ``default``."""
        return self._number(key, given if given is not None else self.meta.get(key, default), from_meta=given is None)

    def _number(self, key: str, value, from_meta: bool, allow_zero: bool = False) -> float:
        """``value`` as a finite float, ``>= 0`` (``> 0`` for limits), or a one-line UsageError."""
        try:
            number = float(value) if not isinstance(value, bool) else float("nan")
        except (TypeError, ValueError):
            number = float("nan")
        if not (number > 0 or (allow_zero and number == 0)) or number == float("inf"):
            where = f"metadata {self.meta_path.name}" if from_meta and self.meta_path else "the command line"
            raise UsageError(f"task package {self.name!r}: {key} {value!r} (from {where}) is not a "
                             f"{'non-negative' if allow_zero else 'positive'} number")
        return number
