"""Run the code blocks of README.md and docs/*.md; check their links (tests/test_docs.py).

How a block is read, in the order of the page:

* A marker on the line before a block (blank lines between are allowed) says it is not run::

      <!-- doctest: gpu -->            needs a GPU (a GPU timer, an Nsight tool, a GPU-only option)
      <!-- doctest: output -->         not a program: output, a file tree, an excerpt of a file
      <!-- doctest: skip REASON -->    runnable, but not here; REASON says why (it installs, needs
                                       a network or a FlagGems checkout, names placeholders ...)

* A block whose first line is ``# NAME.ext`` (``# my_ops.py``) is a file: written into the
  page's folder for later blocks; ``.py`` files must compile, ``.toml``/``.yaml``/``.json``
  parse.
* Another ``python`` block runs in one namespace shared by the page's python blocks.
* A block whose first line starts with ``$ `` is a command and what it prints: the command runs
  and its output (stdout and stderr) must match the lines shown: numbers may differ, ``<...>``
  stands for anything, a line ``...`` for any number of lines, a line ending in ``...`` for any
  rest of the line.
* Any other block is shell commands, one per line (``\\`` continues one, ``#`` starts a comment):
  each must exit 0.

Commands run with ``ZLF_BACKEND=cpu`` in a folder of their own (``tests``, ``examples`` and
``extensions`` link to the repository's); a page needs the extensions its commands name with
``--ext`` or by command (``zlf task`` → ``task``).
"""
from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

#: kinds of marker and what each means
KINDS = {"gpu": "needs a GPU", "output": "not a program", "skip": "runnable, not in a test (says why)"}
#: pages written by a script and checked against it by a test of their own
GENERATED = {"docs/cli.md": "tests/test_cli_reference.py", "docs/walkthrough.md": "tests/test_walkthrough.py"}
#: commands that belong to an extension
COMMAND_EXTENSION = {"task": "task", "profile": "profile", "triage": "profile", "ir": "ir_dump", "ir-diff": "ir_dump",
                     "sweep": "flaggems"}
#: a command run by the doc test is stopped after this many seconds
COMMAND_TIMEOUT_S = 300

_FENCE = re.compile(r"^```([\w+-]*)[ \t]*\n(.*?)^```[ \t]*$", re.M | re.S)
_MARKER = re.compile(r"^<!--\s*doctest:\s*(\S+)\s*(.*?)\s*-->\s*$")
_FILE = re.compile(r"^#\s+([\w./-]+\.(py|toml|ya?ml|json))\s*$")


@dataclass
class Block:
    path: Path
    line: int          # line of the opening fence
    lang: str
    text: str
    kind: Optional[str]  # the marker's kind, None when unmarked
    reason: str

    def where(self, root: Path) -> str:
        try:
            return f"{self.path.relative_to(root)}:{self.line}"
        except ValueError:
            return f"{self.path.name}:{self.line}"


def pages(root: Path) -> list:
    return [root / "README.md", *sorted((root / "docs").glob("*.md"))]


def blocks(path: Path) -> list:
    text = path.read_text()
    found = []
    for m in _FENCE.finditer(text):
        line = text.count("\n", 0, m.start()) + 1
        kind, reason = None, ""
        for prev in reversed(text[:m.start()].split("\n")[:-1]):
            if not prev.strip():
                continue
            marker = _MARKER.match(prev.strip())
            if marker:
                kind, reason = marker.group(1), marker.group(2)
            break
        found.append(Block(path, line, m.group(1), m.group(2), kind, reason))
    return found


def commands(text: str) -> list:
    """The shell commands of a block: ``\\`` joins lines, comments and blank lines go."""
    joined = re.sub(r"\\\n\s*", " ", text)
    out = []
    for line in joined.split("\n"):
        line = line.strip()
        if line and not line.startswith("#"):
            out.append(line)
    return out


def _file_name(block: Block) -> Optional[str]:
    first = block.text.split("\n", 1)[0]
    m = _FILE.match(first)
    return m.group(1) if m else None


def extensions_needed(page_blocks) -> list:
    names = set()
    for block in page_blocks:
        if block.kind is not None or block.lang in ("python", "py") or _file_name(block):
            continue
        for cmd in commands(block.text):
            cmd = cmd[2:] if cmd.startswith("$ ") else cmd
            try:
                words = shlex.split(cmd, comments=True)
            except ValueError:
                words = cmd.split()
            for i, word in enumerate(words):
                if word == "--ext" and i + 1 < len(words):
                    names.add(words[i + 1])
                if word == "zlf" and i + 1 < len(words) and words[i + 1] in COMMAND_EXTENSION:
                    names.add(COMMAND_EXTENSION[words[i + 1]])
    return sorted(names)


def _looks_like_commands(block: Block) -> bool:
    """Whether an unmarked plain block can be run as shell commands: each line starts with a
    program name or an assignment (``VAR=value cmd``), never with a tree's or a table's shape."""
    cmds = commands(block.text)
    if cmds and cmds[0].startswith("$ "):  # a command and what it prints
        return True
    if not cmds:
        return False
    program = re.compile(r"^(\$ )?([A-Z_][A-Z0-9_]*=\S*\s+)*(zlf|python3?|pip|make|cp|rm|mkdir|cd|export|bash|git|"
                         r"cat|echo|ls|ZLF_\w+=\S+)\b")
    return all(program.match(c) for c in cmds)


def marker_problems(path: Path, root: Path) -> list:
    problems = []
    rel = str(path.relative_to(root)) if path.is_relative_to(root) else path.name
    if rel in GENERATED:
        return problems
    text = path.read_text()
    page_blocks = blocks(path)
    fence_lines = {b.line for b in page_blocks}
    for block in page_blocks:
        if block.kind is None:
            if block.lang in ("python", "py") or _file_name(block):
                continue
            if not _looks_like_commands(block):
                problems.append(f"{block.where(root)}: not a command, a python block nor a `# FILE` block, "
                                "and not marked (<!-- doctest: gpu|output|skip REASON -->)")
        elif block.kind not in KINDS:
            problems.append(f"{block.where(root)}: unknown doctest marker {block.kind!r} (known: {', '.join(KINDS)})")
        elif block.kind == "skip" and not block.reason:
            problems.append(f"{block.where(root)}: doctest skip needs a reason")
    lines = text.split("\n")
    for i, line in enumerate(lines, 1):
        if _MARKER.match(line.strip()):
            following = next((j for j in range(i + 1, len(lines) + 1) if lines[j - 1].strip()), None)
            if following not in fence_lines:
                problems.append(f"{rel}:{i}: doctest marker: no code block follows it")
    return problems


# ----------------------------------------------------------------------------- output matching
_NUMBER = re.compile(r"[-+]?\d+(?:\.\d+)?(?:e[-+]?\d+)?")


def _line_pattern(line: str) -> re.Pattern:
    line = " ".join(line.split())
    if line and set(line) <= set("- "):  # a table's rule: its widths follow the cells
        return re.compile(r"[-\s]+$")
    rest = line.endswith("...")
    if rest:
        line = line[:-3].rstrip()
    parts = re.split(r"(<[^<>\s]*>|[-+]?\d+(?:\.\d+)?(?:e[-+]?\d+)?)", line)
    regex = ""
    for k, part in enumerate(parts):
        if k % 2 == 0:
            regex += re.escape(part).replace(r"\ ", r"\s+")
        elif part.startswith("<"):
            regex += r".*?"
        else:
            regex += r"[-+]?\d+(?:\.\d+)?(?:e[-+]?\d+)?"
    return re.compile(regex + (r".*" if rest else r"\s*") + r"$")


def output_matches(expected: list, output: str) -> bool:
    """Whether ``output`` holds ``expected`` (lines of a doc) in order; see the module docstring."""
    got = [" ".join(line.split()) for line in output.split("\n")]
    got = [g for g in got if g]
    want = [w for w in expected if w.strip()]

    def match(i: int, j: int) -> bool:
        if i == len(want):
            return j == len(got)
        if want[i].strip() == "...":
            return any(match(i + 1, k) for k in range(j, len(got) + 1))
        return j < len(got) and bool(_line_pattern(want[i]).match(got[j])) and match(i + 1, j + 1)

    return match(0, 0)


# ----------------------------------------------------------------------------- running a page
def _prepare(work: Path, root: Path) -> None:
    work.mkdir(parents=True, exist_ok=True)
    for name in ("tests", "examples", "extensions"):
        if not (work / name).exists():
            (work / name).symlink_to(root / name, target_is_directory=True)


def _shell(cmd: str, work: Path, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", cmd], cwd=work, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, timeout=COMMAND_TIMEOUT_S, stdin=subprocess.DEVNULL)


def run_page(path: Path, root: Path, work: Path, env: dict) -> list:
    """Run a page's unmarked blocks in order in ``work``; a message per failure."""
    _prepare(work, root)
    failures = []
    namespace: dict = {"__name__": "__doctest__"}
    for block in blocks(path):
        if block.kind is not None:
            continue
        where = block.where(root)
        name = _file_name(block)
        if name:
            target = work / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(block.text)
            try:
                if name.endswith(".py"):
                    compile(block.text, name, "exec")
                elif name.endswith(".toml"):
                    import tomllib

                    tomllib.loads(block.text)
                elif name.endswith((".yaml", ".yml")):
                    import yaml

                    yaml.safe_load(block.text)
                elif name.endswith(".json"):
                    json.loads(block.text)
            except Exception as exc:  # noqa: BLE001 - any failure of the file is the finding
                failures.append(f"{where}: {name} does not parse: {exc}")
            continue
        if block.lang in ("python", "py"):
            cwd = os.getcwd()
            try:
                os.chdir(work)
                exec(compile(block.text, where, "exec"), namespace)
            except Exception as exc:  # noqa: BLE001
                failures.append(f"{where}: python block raised {type(exc).__name__}: {exc}")
            finally:
                os.chdir(cwd)
            continue
        lines = block.text.rstrip("\n").split("\n")
        if lines[0].startswith("$ "):
            proc = _shell(lines[0][2:], work, env)
            output = proc.stdout
            if not output_matches(lines[1:], output):
                failures.append(f"{where}: `{lines[0][2:]}` printed\n{output}\n--- where the page shows\n"
                                + "\n".join(lines[1:]))
            continue
        for cmd in commands(block.text):
            proc = _shell(cmd, work, env)
            if proc.returncode != 0:
                failures.append(f"{where}: `{cmd}` exit {proc.returncode}\n{proc.stdout[-3000:]}")
    return failures


def shown_table_headers(path: Path, command: str = "zlf run") -> list:
    """``(where, header words)`` of every table a block shows as the output of ``$ COMMAND``,
    marked or not (a GPU run's output cannot be run here, its columns can be checked)."""
    found = []
    for block in blocks(path):
        lines = block.text.split("\n")
        if not lines[0].startswith(f"$ {command}"):
            continue
        for i, line in enumerate(lines[1:-1], 1):
            rule = lines[i + 1].strip()
            if rule and set(rule) <= set("- ") and line.strip():
                root = path.parent if path.name == "README.md" else path.parent.parent
                found.append((block.where(root), line.split()))
                break
    return found


# ----------------------------------------------------------------------------- links
_LINK = re.compile(r"(?<!!)\[[^\]\n]*\]\(([^)\s]+)\)")


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens. Emphasis
    marks go; an underscore inside a word or a code span (``test_hostile_input.py``) stays."""
    parts = re.split(r"(`[^`]*`)", heading.strip())
    text = "".join(p[1:-1] if p.startswith("`") else re.sub(r"\*|(?<!\w)_|_(?!\w)", "", p) for p in parts).lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set:
    text = _FENCE.sub("", path.read_text())
    found, seen = set(), {}
    for m in re.finditer(r"^#{1,6}\s+(.*?)\s*#*\s*$", text, re.M):
        base = slug(m.group(1))
        n = seen.get(base, 0)
        seen[base] = n + 1
        found.add(base if n == 0 else f"{base}-{n}")
    found |= set(re.findall(r'<a (?:name|id)="([^"]+)"', text))
    return found


def broken_links(path: Path, root: Path) -> list:
    text = _FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), path.read_text())
    text = re.sub(r"`[^`\n]*`", "", text)
    rel = path.relative_to(root)
    problems = []
    for m in _LINK.finditer(text):
        target = m.group(1)
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        line = text.count("\n", 0, m.start()) + 1
        file_part, _, anchor = target.partition("#")
        dest = (path.parent / file_part).resolve() if file_part else path
        if file_part and not dest.exists():
            problems.append(f"{rel}:{line}: link to {target}: {file_part} does not exist")
            continue
        if anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            problems.append(f"{rel}:{line}: link to {target}: no heading #{anchor} in {dest.name}")
    return problems

