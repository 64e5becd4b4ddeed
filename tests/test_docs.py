"""The docs run: every code block of README.md and docs/*.md is either run here, on the cpu
backend, or carries a visible marker saying why it cannot be (tests/docs_check.py); every relative
link and anchor leads somewhere. One test per page runs that page's blocks in order, in a
folder of its own, so a page's file blocks (``# my_ops.py``) serve its later commands."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

import docs_check as doctest

ROOT = Path(__file__).resolve().parent.parent
PAGES = doctest.pages(ROOT)


def _page_param(path: Path):
    generated = str(path.relative_to(ROOT)) in doctest.GENERATED
    needs = [] if generated else doctest.extensions_needed(doctest.blocks(path))
    return pytest.param(path, id=str(path.relative_to(ROOT)), marks=[pytest.mark.extensions(*needs)] if needs else [])


@pytest.mark.parametrize("page", [_page_param(p) for p in PAGES])
def test_page_runs(page, tmp_path, monkeypatch):
    """Each block runs (commands exit 0, ``$ cmd`` blocks print what they show), or is marked."""
    if str(page.relative_to(ROOT)) in doctest.GENERATED:
        pytest.skip(f"generated; checked by {doctest.GENERATED[str(page.relative_to(ROOT))]}")
    env = {**os.environ, "ZLF_CACHE_DIR": str(tmp_path / "cache"), "ZLF_BACKEND": "cpu", "ZLF_NO_PROGRESS": "1",
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}", "NO_COLOR": "1"}
    failures = doctest.run_page(page, ROOT, tmp_path / "work", env)
    assert not failures, "\n\n".join(failures)


def test_every_block_is_run_or_marked():
    """A block the doc test cannot run (no shell command, no python, no file) must say so with a
    marker; every marker names a known kind, a ``skip`` says why, and none stands alone."""
    problems = []
    for page in PAGES:
        problems += doctest.marker_problems(page, ROOT)
    assert not problems, "\n".join(problems)


def test_shown_run_tables_use_the_real_columns():
    """A page may show a GPU run's table it cannot run; its header must be the one zlf prints."""
    from zlf.console import results_table

    real = results_table([], colour=False).splitlines()[0].split()
    shown = [item for page in PAGES for item in doctest.shown_table_headers(page)]
    assert shown, "README.md shows a zlf run table"
    wrong = [f"{where}: {' '.join(words)}" for where, words in shown if words != real]
    assert not wrong, f"zlf run prints: {' '.join(real)}\n" + "\n".join(wrong)


def test_links_and_anchors_resolve():
    problems = []
    for page in PAGES:
        problems += doctest.broken_links(page, ROOT)
    assert not problems, "\n".join(problems)


def test_relu_with_out_keyword_fails_the_doc_test(tmp_path):
    """The doc test catches what a newcomer met: an op file whose fn calls ``torch.relu(x, out=out)``
    (torch.relu has no ``out=``) fails its ``zlf run``."""
    page = tmp_path / "ops.md"
    page.write_text(
        "```python\n# my_ops.py\nimport torch\nimport zlf\n\n\n"
        "def make_inputs(shape, dtype, device):\n"
        "    x = torch.randn(shape, dtype=getattr(torch, dtype), device=device)\n"
        "    return (x, torch.empty_like(x))\n\n\n"
        "relu_op = zlf.Op(name='relu', fn=lambda x, out: torch.relu(x, out=out), make_inputs=make_inputs,\n"
        "                 shapes=[(64,)], dtypes=('float32',), reference=lambda x, out: torch.relu(x), outputs=(1,))\n"
        "```\n\n```\nzlf run my_ops.py::relu_op\n```\n")
    env = {**os.environ, "ZLF_CACHE_DIR": str(tmp_path / "cache"), "ZLF_BACKEND": "cpu", "ZLF_NO_PROGRESS": "1",
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    failures = doctest.run_page(page, ROOT, tmp_path / "work", env)
    assert len(failures) == 1 and "zlf run my_ops.py::relu_op" in failures[0] and "exit 1" in failures[0]


def test_unmarked_tree_is_a_problem_and_output_is_compared(tmp_path):
    page = tmp_path / "p.md"
    page.write_text("```\nruns/\n  meta.json\n```\n\n<!-- doctest: skip -->\n```\nzlf run\n```\n\n"
                    "<!-- doctest: frobnicate -->\n```\nx\n```\n\n<!-- doctest: gpu -->\n\ntext\n")
    problems = doctest.marker_problems(page, tmp_path)
    assert any("p.md:1" in p and "not a command" in p for p in problems)
    assert any("p.md:7" in p and "skip needs a reason" in p for p in problems)
    assert any("frobnicate" in p for p in problems)
    assert any("p.md:16" in p and "no code block follows" in p for p in problems)


def test_expected_output_wildcards():
    out = "point status\n----- ------\nadd/1024/float32 ok 2.41\nrun dir: runs/add_20261205-074523\n"
    assert doctest.output_matches(["point status", "...", "add/1024/float32 ok 9.9",
                                   "run dir: runs/add_<YYYYmmdd-HHMMSS>"], out)
    assert not doctest.output_matches(["point state", "..."], out)
    assert not doctest.output_matches(["add/1024/float32 FAILED 2.41"], out)


def test_broken_link_and_anchor_are_found(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("# Title\n\n## Some part: here\n\n[x](b.md) [y](#some-part-here) "
                                            "[z](#nope) [w](a.md#title) `[c](code.md)`\n")
    problems = doctest.broken_links(tmp_path / "docs" / "a.md", tmp_path)
    assert len(problems) == 2 and "b.md" in problems[0] and "#nope" in problems[1]


def test_extensions_a_page_needs():
    """A page that runs ``zlf task`` needs the task extension active (it skips where that is absent)."""
    block = doctest.Block(Path("x"), 1, "", "zlf task PKG --ext cupti\nzlf run add\n", None, "")
    assert doctest.extensions_needed([block]) == ["cupti", "task"]
