"""docs/walkthrough.md is the transcript scripts/walkthrough.py writes: the same steps, in order."""
from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _script():
    spec = importlib.util.spec_from_file_location("walkthrough", ROOT / "scripts" / "walkthrough.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_walkthrough_page_holds_the_scripts_steps():
    script = _script()
    assert script.steps_of(script.PAGE.read_text()) == script.expected_steps(), \
        "docs/walkthrough.md is stale: run python scripts/walkthrough.py"


def test_walkthrough_step_check_sees_a_missing_command():
    script = _script()
    page = script.render({})
    assert script.steps_of(page) == script.expected_steps()
    assert script.steps_of(page.replace("$ zlf ops my_ops.py\n", "")) != script.expected_steps()


def test_walkthrough_uses_the_op_file_of_ops_md():
    assert "torch.clamp(x, min=0, out=out)" in _script().op_file()


def test_normalise_hides_machine_paths_and_timestamps(tmp_path):
    script = _script()
    text = (f"run dir: {tmp_path}/runs/relu_20261205-080711\nstarted 2026-12-05T08:07:11+00:00\n"
            "not referenced in /root/.pyenv/versions/3.11.7/lib/python3.11/site-packages/triton")
    assert script.normalise(text, tmp_path) == ("run dir: ./runs/relu_<YYYYmmdd-HHMMSS>\nstarted <timestamp>\n"
                                                "not referenced in <site-packages>/triton")
