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

A word means one thing on every command. An older spelling is accepted for a release, hidden
from `--help`, and prints one line when used (`zlf: note: --json is deprecated: use --format
json`); a prefix of a flag is never expanded (`--warmup` is not `--warmup-ms`).

| concept | spelling (every command that has it) | older spelling (deprecated: a one-line note) |
|---|---|---|
| the ops to run | OP arguments: `run`, `ab`, `ops`, `sweep` | `--ops A,B` (`sweep`) |
| dtypes of the points | `--dtype D` (repeatable or comma-separated): `run`, `ab`, `ops`; FlagGems ops follow it | `--dtypes D` (FlagGems' `--dtypes`) |
| seed of the points' inputs | `--seed N` (seed extension): `run`, `ab`, `task` | |
| seed of a random choice of ops | `--sample-seed S`: `sweep` | `--seed S` (`sweep`) |
| time units | `--warmup-ms`, `--rep-ms` are milliseconds; `--warmup-calls`, `--iters` are calls (`task`); `--time-limit` and `--*-time-limit` are seconds | `--warmup N` (`task`, calls) |
| FlagGems' run options | `--flaggems-max-shapes N`, `--flaggems-compile-time-limit SEC`: `run`, `ab`, `sweep` | `--max-shapes`, `--compile-time-limit` (`sweep`) |
| CI gate on slower points | `--fail-if-slower [PCT]` (PCT default 0): `compare`, `ab` | `--fail-on-slower` (`ab`) |
| label of the directory a command creates | `--name LABEL`: `run`, `task`, `ab`, `ir`, `sweep` | `--label LABEL` (`ab`) |
| output format | `--format table\\|markdown\\|csv\\|json`: `run`, `task`, `compare`, `ab`, `ops`, `plugins`, `calibrate`, `sweep` | `--json` |
| where output goes | `--out`: the folder that receives what the command creates: a run, campaign, sweep or bisect directory under it, default `runs/` (`run`, `task`, `ab`, `ir`, `sweep`, `history bisect`); `profile/` under it, default the run directory (`.` for an op): `profile`; `triage/` under it, default the campaign: `triage`; `report --out` takes a folder or `FILE.md`; `ir-diff --out DIR` is the diff folder itself (default `runs/ir-diff_<timestamp>`) | |
| a change of B against A | `delta_pct` = (B − A) / A, positive is slower: `compare`, `ab`, `report`, `triage`; `zlf task` reports `speedup` = baseline / candidate, above 1 is faster | |
| numbers | every numeric flag takes a finite number in its range (`nan`, `inf`, `1e300` s are refused in one line, exit 2) | |

Verdicts of B against A are the same words in `zlf compare` and `zlf ab`, in every format:
`FASTER`, `SLOWER`, `SAME` (and `UNSURE`, `zlf ab` only: the interval is neither inside nor
beyond the threshold). `zlf compare`'s json keeps `"unchanged"` (the old word for `SAME`)
next to `"same"` in its summary for a release.

Fields carry the names of results.jsonl in every format: `median_ms`, `gbps`, `tflops`
(`median_ms_A` / `median_ms_B` per side in `compare`), `delta_pct`, `verdict`; `zlf ab` and
`zlf report` of a campaign name a side's geometric mean over the rounds `gmean_ms_A` /
`gmean_ms_B` (`gmean_cycles_A` ... with `--metric`). The human tables write `delta_pct` for
people under `change` (`+30.0%`, `300× slower` beyond a factor of two); csv and json keep the
number.

Extensions are named by their entry point (`--ext task`), installed by their distribution
(`pip install zlf-taskpkg`); `zlf plugins` shows both. An extension's options appear only on the
commands they apply to: each extension asks what a command does (`add_options(parser, command,
traits)`, `zlf.CommandTraits`: times points, makes inputs, plans shapes, forwards run options),
never its name; `zlf ab` accepts every run option of the active extensions and names them in one
paragraph of its help.

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
