"""The hookspec docstrings are the API: every hook must be documented completely."""
import inspect

import pytest

from zlf import hookspecs

HOOKS = [
    (name, fn) for name, fn in inspect.getmembers(hookspecs, inspect.isfunction)
    if hasattr(fn, "zlf_spec")
]


def test_the_mandatory_hooks_exist():
    names = {name for name, _ in HOOKS}
    assert {"before_run", "make_inputs", "time_fn", "on_compile", "on_launch", "after_run"} <= names


@pytest.mark.parametrize("name,fn", HOOKS, ids=[n for n, _ in HOOKS])
def test_hook_is_documented(name, fn):
    doc = inspect.getdoc(fn)
    assert doc, f"hook {name} has no docstring"
    assert doc.splitlines()[0].strip(), f"hook {name} has no summary line"
    assert "called" in doc.lower(), f"hook {name} does not say when it is called"
    for param in inspect.signature(fn).parameters:
        assert f":param {param}:" in doc, f"hook {name} does not document parameter {param!r}"
    assert ":return:" in doc, f"hook {name} does not say what to return"
    if fn.zlf_spec.get("firstresult"):
        assert "first non-none result wins" in doc.lower(), f"firstresult hook {name} must say so"
