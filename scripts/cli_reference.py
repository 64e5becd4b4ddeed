"""Write docs/cli.md: the words zlf uses everywhere, then every command's ``--help``.

    python scripts/cli_reference.py          # rewrite docs/cli.md
    python scripts/cli_reference.py --check  # exit 1 when docs/cli.md differs from --help

The help is rendered 100 columns wide with every installed extension active (``zlf --version``
lists them); tests/test_cli_reference.py fails when the page and ``--help`` drift apart.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "cli.md"
WIDTH = "100"

HEAD = """\
# Command-line reference

Generated from `--help` by `python scripts/cli_reference.py` (all extensions installed, 100
columns); `tests/test_cli_reference.py` fails when this page and `--help` differ. The words
first, then each command.

## One spelling per concept

| concept | spelling (every command that has it) | older spelling, still accepted for a release (hidden from `--help`) |
|---|---|---|
| dtypes of the points | `--dtype D` (repeatable or comma-separated): `run`, `ab`, `ops`; FlagGems ops follow it | `--dtypes D` (FlagGems' `--dtypes`) |
| CI gate on slower points | `--fail-if-slower [PCT]` (PCT default 0): `compare`, `ab` | `--fail-on-slower` (`ab`) |
| label of the directory a command creates | `--name LABEL`: `run`, `task`, `ab`, `ir` | `--label LABEL` (`ab`) |
| output format of a summary | `--format table\\|markdown\\|csv\\|json`: `run`, `task`, `compare`, `ab`, `ops` | `--json` (`run`, `task`) |
| where output goes | `--out`: the folder that receives what the command creates (a run or campaign directory under it: `run`, `task`, `ab`, `ir`; `profile/` under it: `profile`); `report --out` takes a folder or `FILE.md`; `ir-diff --out DIR` is the diff folder itself | |

Verdicts of B against A are the same words in `zlf compare` and `zlf ab`, in every format:
`FASTER`, `SLOWER`, `SAME` (and `UNSURE`, `zlf ab` only: the interval is neither inside nor
beyond the threshold). `zlf compare`'s json keeps `"unchanged"` (the old word for `SAME`)
next to `"same"` in its summary for a release.

Fields carry the names of results.jsonl in every format: `median_ms`, `gbps`, `tflops`
(`_A` / `_B` per side in `compare` and `ab`), `delta_pct`, `verdict`.

Extensions are named by their entry point (`--ext task`), installed by their distribution
(`pip install zlf-taskpkg`); `zlf plugins` shows both. An extension's options appear only on the
commands they affect (`add_options(parser, command)`); `zlf ab` accepts every run option of the
active extensions and names them in one paragraph of its help.

## Shell completion

Commands, options and extension options complete through
[argcomplete](https://kislyuk.github.io/argcomplete/) (installed with zlf). Activate it once
per shell (add the line to `~/.bashrc`; zsh with `bashcompinit` too):

```bash
eval "$(register-python-argcomplete zlf)"
```
"""


def commands(parser) -> list:
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return list(dict.fromkeys(sub.choices.values()))  # an alias maps to the same parser


def render() -> str:
    os.environ["COLUMNS"] = WIDTH
    os.environ.pop("ZLF_EXTENSIONS", None)
    os.environ.pop("ZLF_DISABLE", None)
    from zlf.cli import build_parser
    from zlf.session import Session

    session = Session.create(argparse.Namespace(), tolerant=True)
    parser = build_parser(session.hooks)
    parts = [HEAD, "## zlf", "", "```text", parser.format_help().rstrip(), "```", ""]
    for p in commands(parser):
        parts += [f"## {p.prog}", "", "```text", p.format_help().rstrip(), "```", ""]
    return "\n".join(parts)


def main(argv) -> int:
    text = render()
    if "--check" in argv:
        if PAGE.read_text() != text:
            print(f"{PAGE} differs from --help: run python scripts/cli_reference.py", file=sys.stderr)
            return 1
        return 0
    PAGE.write_text(text)
    print(f"wrote {PAGE}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
