"""The layout shows the architecture: no import circle among core's modules, and core names no
extension (outside comments and docstrings)."""
from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

CORE = Path(__file__).parent.parent / "core"

#: words that name an extension (or its concern) and have no place in core's code.
EXTENSION_WORDS = re.compile(r"autotune|replay_from|taskpkg|zlf_task|flaggems|ir_dump|irtree|maca|musa|cudagraph",
                             re.IGNORECASE)

#: library and record-format names that contain such a word but name no extension: Triton's own
#: autotuner (``triton.autotune``, ``triton.runtime.autotuner.Autotuner``), the ``in_autotune``
#: field of a compile event (results.jsonl), torch's ``CUDAGraph``.
LIBRARY_NAMES = re.compile(r"triton\.autotune\b|\b[Aa]utotuner\b|\bin_autotune\b|\bCUDAGraph\b")

#: (file, word) pairs still in core that another change removes these (the run engine's
#: environment prefixes, the CUDA backend stepping aside for MACA): keep this list short.
#: extension names inside strings that are documentation, not code: help examples and the backend
#: contract's descriptions. Each entry must still be found (a stale entry fails the test).
DOC_STRINGS = {
    ("commands.py", "cudagraph"), ("commands.py", "ir_dump"),  # zlf run's help examples
    ("options.py", "cudagraph"),  # --timer's help example
    ("backends/base.py", "musa"),  # the contract's description of new_graph
}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(CORE).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(["zlf", *parts])


def _modules() -> dict:
    return {_module_name(p): p for p in sorted(CORE.rglob("*.py"))}


def _imports(name: str, path: Path, known: set) -> set:
    """The zlf modules ``path`` imports, at module level or inside functions (a lazy import
    is still a dependency)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            targets = [f"{base}.{a.name}" for a in node.names] + [base]
        else:
            continue
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name and not name.startswith(target + "."):
                out.add(target)  # a submodule importing its own package's __init__ is no edge back
    return out


def import_graph() -> dict:
    modules = _modules()
    return {name: _imports(name, path, set(modules)) for name, path in modules.items()}


def find_cycle(graph: dict, ignore=frozenset()):
    """One import cycle as a list of modules ``[a, b, ..., a]``, or None."""
    state, stack = {}, []

    def visit(node):
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if frozenset({node, nxt}) in ignore:
                continue
            if state.get(nxt) == "open":
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        stack.pop()
        state[node] = "done"
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def test_the_import_graph_is_read():
    graph = import_graph()
    assert "zlf.ab.execute" in graph["zlf.ab.campaign"] and "zlf.executors" in graph["zlf.ab.execute"]
    assert "zlf.ab.campaign" not in graph["zlf.ab.execute"]
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_no_import_circle_among_core_modules():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import circle: " + " -> ".join(cycle)


def code_words(source: str) -> list:
    """``(line, word)`` of extension words in code: names and strings, not comments or docstrings."""
    docstrings = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                    and isinstance(body[0].value.value, str):
                docstrings.add(body[0].value.lineno)
    found, before, prev = [], ("", ""), ""
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        text, before = tok.string, (before[1], tok.string)
        if tok.type == tokenize.COMMENT or (tok.type == tokenize.STRING and tok.start[0] in docstrings):
            continue
        if tok.type == tokenize.NAME and before[0] == ".":  # an attribute: read it with its owner
            text = f"{prev}.{text}"
        prev = text if tok.type == tokenize.NAME else (prev if tok.string == "." else "")
        for m in EXTENSION_WORDS.finditer(LIBRARY_NAMES.sub("", text)):
            found.append((tok.start[0], m.group(0).lower()))
    return found


def test_the_word_finder_skips_comments_and_docstrings():
    source = '"""autotune in a docstring."""\nx = 1  # flaggems in a comment\ny = "ir_dump"\n' \
             'def f():\n    """irtree"""\n    return MUSA_PREFIX\n@triton.autotune(key=[])\ndef g(): return autotune_replay\n'
    assert code_words(source) == [(3, "ir_dump"), (6, "musa"), (8, "autotune")]


def test_core_names_no_extension():
    found, documented = [], set()
    for path in sorted(CORE.rglob("*.py")):
        rel = path.relative_to(CORE).as_posix()
        for line, word in code_words(path.read_text()):
            if (rel, word) in DOC_STRINGS:
                documented.add((rel, word))
            else:
                found.append(f"core/{rel}:{line}: {word}")
    assert not found, "core names an extension:\n" + "\n".join(found)
    assert documented == DOC_STRINGS, f"stale DOC_STRINGS entries: {sorted(DOC_STRINGS - documented)}"
