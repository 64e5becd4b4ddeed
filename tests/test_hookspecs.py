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
    assert {"before_run", "time_fn", "on_compile", "on_launch", "after_run"} <= names


@pytest.mark.parametrize("name,fn", HOOKS, ids=[n for n, _ in HOOKS])
def test_hook_is_documented(name, fn):
    doc = inspect.getdoc(fn)
    assert doc, f"hook {name} has no docstring"
    assert doc.splitlines()[0].strip(), f"hook {name} has no summary line"
    assert "called" in doc.lower(), f"hook {name} does not say when it is called"
    for param in inspect.signature(fn).parameters:
        assert f":param {param}:" in doc, f"hook {name} does not document parameter {param!r}"
    assert ":return:" in doc, f"hook {name} does not say what to return"
    if hasattr(fn, hookspecs.EXCLUSIVE):
        assert fn.zlf_spec.get("firstresult"), f"exclusive hook {name} must be firstresult"
        assert "exclusive" in doc.lower(), f"exclusive hook {name} must say so"
        assert "first non-none result wins" not in doc.lower(), f"exclusive hook {name} has one provider"
    elif fn.zlf_spec.get("firstresult"):
        assert "first non-none result wins" in doc.lower(), f"firstresult hook {name} must say so"


def test_exclusivity_is_read_from_the_hookspecs():
    from zlf.plugins import Selection, build_plugin_manager, exclusive_hooks

    pm, _ = build_plugin_manager(Selection(only=()))
    assert exclusive_hooks(pm) == {"time_fn": hookspecs.Exclusive(hookspecs.TIMER, core_when_other=True),
                                   "kernel_timer": hookspecs.Exclusive(hookspecs.TIMER),
                                   "op_shapes": hookspecs.Exclusive()}


def test_every_hook_core_calls_has_a_typed_method_on_the_facade():
    """A reader follows ``hooks.NAME(...)`` to the hookspec of the same name: no generic
    ``call("name")`` or ``__getattr__`` in between."""
    from zlf.plugins import Hooks

    for name, _ in HOOKS:
        method = getattr(Hooks, name, None)
        assert callable(method), f"Hooks has no method for hook {name}"
    assert not hasattr(Hooks, "__getattr__") and not hasattr(Hooks, "call")


def test_a_hookspec_marked_exclusive_gets_one_provider():
    """Nothing but the mark makes a hook exclusive: a new spec with it is enforced by Hooks."""
    import types

    import pluggy

    from zlf import ExtensionError, hookimpl
    from zlf.plugins import Hooks

    @hookspecs._exclusive()
    @hookspecs._spec(firstresult=True)
    def pick_colour(point):
        """Called by this test only."""

    pm = pluggy.PluginManager(hookspecs.NAME)
    pm.add_hookspecs(types.SimpleNamespace(pick_colour=pick_colour))
    pm.register(type("One", (), {"pick_colour": staticmethod(hookimpl(lambda point: "red"))})(), name="one")
    assert Hooks(pm).caller("pick_colour")(point=1) == "red"
    pm.register(type("Two", (), {"pick_colour": staticmethod(hookimpl(lambda point: "blue"))})(), name="two")
    with pytest.raises(ExtensionError, match="two active extensions implement pick_colour"):
        Hooks(pm).caller("pick_colour")(point=1)
    assert Hooks(pm, preferred={"pick_colour": "two"}).caller("pick_colour")(point=1) == "blue"


def test_the_readme_names_every_hook_and_no_other():
    """The README's list of hooks is the hookspecs' list (it once named 18 of 24)."""
    import re
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    section = readme.split("## Extensions", 1)[1].split("\n|", 1)[0]
    named = set(re.findall(r"`([a-z_]+)`", section)) - {"zlf"}
    assert named == {name for name, _ in HOOKS}


def test_the_architecture_table_names_every_core_module():
    """docs/architecture.md's module table lists every module of core/ and of core/ab/."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    doc = (root / "docs" / "architecture.md").read_text()
    table = doc.split("## core/", 1)[1].split("\n## ", 1)[0]
    named = set(re.findall(r"`([a-z_]+(?:\.py|/))`", table))
    for listing in re.findall(r"`ab/` \(([^)]*)\)", table):
        named |= {f"ab/{m.strip(' `')}.py" for m in listing.split(",")}
    modules = {p.name for p in (root / "core").glob("*.py")} | {
        f"{p.name}/" for p in (root / "core").iterdir() if (p / "__init__.py").is_file()}
    modules |= {f"ab/{p.name}" for p in (root / "core" / "ab").glob("*.py") if p.name != "__init__.py"}
    assert sorted(modules - named) == []
