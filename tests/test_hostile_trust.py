"""The trust boundary, security (docs/hostile.md): a record read from disk never becomes code, an
environment or a command; writes never follow a link; records keep no credential, by name or by
value; CSV cells and markdown pages hold no formula and no markup taken from a record.

Each case failed before its fix (a recorded ``LD_PRELOAD`` in the profiled process, a file
written through a planted link, a password in meta.json, a formula in a CSV cell ...).
"""
from __future__ import annotations

import csv
import io
import json
import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import copy_run, core_only_env, read_records, run_dir_from, zlf_core


def zlf(*args, cwd, env=None, extensions=None):
    full_env = {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "NO_COLOR", "ZLF_DISABLE")}
    full_env.update({"ZLF_NO_PROGRESS": "1", "ZLF_CACHE_DIR": str(Path(cwd) / "cache")})
    full_env.update({"ZLF_EXTENSIONS": extensions} if extensions else core_only_env())
    full_env.update(env or {})
    return subprocess.run([sys.executable, "-m", "zlf", *map(str, args)], cwd=cwd, env=full_env,
                          capture_output=True, text=True, timeout=300)


def one_line_error(proc, *needles) -> str:
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2, f"rc={proc.returncode}\n{out}"
    assert "Traceback" not in out, out
    lines = [l for l in proc.stderr.splitlines() if l.strip() and not l.startswith("zlf: warning:")]
    assert len(lines) == 1 and lines[0].startswith("zlf: error: "), proc.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def clean_exit(proc, rc=0) -> None:
    out = proc.stdout + proc.stderr
    assert proc.returncode == rc, f"rc={proc.returncode}\n{out}"
    assert "Traceback" not in out, out


def edit_meta(run_dir: Path, change) -> None:
    meta = json.loads((run_dir / "meta.json").read_text())
    change(meta)
    (run_dir / "meta.json").write_text(json.dumps(meta))


def rewrite_records(run_dir: Path, change) -> None:
    docs = read_records(run_dir)
    change(docs)
    (run_dir / "results.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))


# ============================================================================ 1 a record is never code
FAKE_NCU = '''#!{python}
"""Stand-in for ncu: writes what the profiled process would have been given, profiles nothing."""
import json, os, sys
keys = ("LD_PRELOAD", "LD_AUDIT", "PYTHONPATH", "PYTHONSTARTUP", "TRITON_PTXAS_PATH", "TRITON_CACHE_DIR",
        "CUDA_INJECTION64_PATH", "DISABLE_MMA_V3", "BASH_ENV")
with open(os.environ["FAKE_NCU_LOG"], "a") as f:
    f.write(json.dumps({{"env": {{k: os.environ.get(k) for k in keys}}, "cwd": os.getcwd(), "args": sys.argv[1:]}}) + "\\n")
'''


def fake_ncu_env(tmp_path: Path) -> dict:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    fake = bin_dir / "ncu"
    fake.write_text(FAKE_NCU.format(python=sys.executable))
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    return {"ZLF_NCU": str(fake), "FAKE_NCU_LOG": str(tmp_path / "ncu.jsonl")}


@pytest.mark.extensions("profile")
def test_profile_replays_no_recorded_variable_that_loads_code(base_run, tmp_path):
    """A received run whose meta.json says LD_PRELOAD=/x/evil.so: zlf profile ran that library."""
    run_dir = copy_run(base_run, tmp_path / "received")
    evil = {"LD_PRELOAD": "/x/evil.so", "LD_AUDIT": "/x/audit.so", "PYTHONPATH": "/x/py", "PYTHONSTARTUP": "/x/s.py",
            "TRITON_PTXAS_PATH": "/x/ptxas", "TRITON_CACHE_DIR": "/x/cache", "CUDA_INJECTION64_PATH": "/x/inj.so",
            "BASH_ENV": "/x/rc", "DISABLE_MMA_V3": "1"}
    edit_meta(run_dir, lambda m: m.__setitem__("environment", evil))
    planted = tmp_path / "planted_cwd"
    planted.mkdir()
    edit_meta(run_dir, lambda m: m.__setitem__("cwd", str(planted)))  # python -m imports from its cwd
    point = read_records(run_dir)[0]["point"]
    env = fake_ncu_env(tmp_path)
    proc = zlf("profile", run_dir, point, "--out", tmp_path / "p", cwd=tmp_path, env=env, extensions="profile,shapes")
    assert "Traceback" not in proc.stderr, proc.stderr
    call = json.loads((tmp_path / "ncu.jsonl").read_text().splitlines()[0])
    given = call["env"]
    for name in evil:
        if name == "DISABLE_MMA_V3":
            assert given[name] == "1"  # a switch the run's extensions declare is replayed
        else:
            assert given[name] in (None, os.environ.get(name)), (name, given[name])  # this machine's own, never the record's
    assert Path(call["cwd"]).resolve() == tmp_path.resolve()  # never the recorded working directory
    # it says what it replays and what it refused
    assert "replays op" in proc.stderr and "DISABLE_MMA_V3=1" in proc.stderr
    assert "LD_PRELOAD (changes how a process starts" in proc.stderr
    command = next((tmp_path / "p" / "profile").glob("*/command.sh")).read_text()
    assert "/x/evil.so" not in command and "planted_cwd" not in command


@pytest.mark.parametrize("name, value", [
    ("LD_PRELOAD", "/x/evil.so"), ("LD_LIBRARY_PATH", "/x"), ("LD_AUDIT", "evil.so"), ("DYLD_INSERT_LIBRARIES", "e.dylib"),
    ("PYTHONPATH", "/x"), ("PYTHONHOME", "/x"), ("PYTHONSTARTUP", "/x/s.py"), ("PYTHONINSPECT", "1"),
    ("BASH_ENV", "/x/rc"), ("PATH", "/x/bin"), ("TRITON_PTXAS_PATH", "ptxas"), ("TRITON_LIBCUDA_PATH", "x"),
    ("TRITON_CACHE_DIR", "cache"), ("TRITON_OVERRIDE_DIR", "o"), ("TORCH_EXTENSIONS_DIR", "t"),
    ("CUDA_INJECTION64_PATH", "inj.so"), ("TRITON_SWITCH", "$(touch /tmp/pwned)"), ("TRITON_SWITCH", "`id`"),
    ("TRITON_SWITCH", "/abs/path"), ("TRITON_SWITCH", "a;b"), ("TRITON SWITCH", "1"), ("ZLF_TASK_CACHE", "c"),
])
@pytest.mark.extensions("profile")
def test_profiled_environment_takes_no_code_from_a_record(name, value, monkeypatch, tmp_path):
    from zlf.records import Point
    from zlf_profile.profile import Target, child_environment

    monkeypatch.delenv(name, raising=False)
    meta = {"environment": {name: value, "DISABLE_MMA_V3": "1"}}
    # even where an extension declared the prefix as mattering
    prefixes = ("LD_", "DYLD_", "PYTHON", "BASH_", "PATH", "TRITON", "TORCH_", "CUDA_", "ZLF_", "DISABLE_")
    env = child_environment(Target(Point("m", (1,), "float32"), "m", tmp_path, None, meta), prefixes=prefixes)
    assert env.get(name) != value
    assert env["DISABLE_MMA_V3"] == "1"  # control: a plain switch is replayed


@pytest.mark.extensions("profile")
def test_profile_imports_no_op_file_a_record_names(base_run, tmp_path):
    """meta.json's ops naming a file: zlf profile imported it."""
    run_dir = copy_run(base_run, tmp_path / "received")
    evil = tmp_path / "evil_ops.py"
    evil.write_text("open(__file__ + '.ran', 'w').write('pwned')\n")
    edit_meta(run_dir, lambda m: m.setdefault("options", {}).__setitem__("ops", [str(evil)]))
    point = read_records(run_dir)[0]["point"]
    proc = zlf("profile", run_dir, point, "--out", tmp_path / "p", cwd=tmp_path, env=fake_ncu_env(tmp_path),
               extensions="profile,shapes")
    one_line_error(proc, "zlf imports no code a record names", "--op")
    assert not Path(str(evil) + ".ran").exists()
    assert not (tmp_path / "ncu.jsonl").exists()


@pytest.mark.extensions("profile")
def test_triage_runs_no_side_of_a_campaign_it_cannot_verify(tmp_path, monkeypatch):
    """A received campaign.json names the sides' interpreters and variables: triage profiled them."""
    from zlf.ab.campaign import Campaign
    from zlf_profile.triage import unverified

    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # no signing key of this user
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "home" / ".config"))
    data = {"format": 1, "sides": [{"name": "A", "python": "/x/evil", "env": {"LD_PRELOAD": "/x/e.so"}},
                                   {"name": "B", "python": "/x/evil", "env": {}}], "signature": "0" * 64}
    assert unverified(Campaign(tmp_path, data))


# ============================================================================ 2 writes never follow links
def test_report_never_writes_through_planted_links(base_run, tmp_path):
    run_dir = copy_run(base_run, tmp_path / "received")
    victim_md, victim_png = tmp_path / "victim.md", tmp_path / "victim.png"
    victim_md.write_text("keep me\n")
    victim_png.write_text("keep me too\n")
    os.symlink(victim_md, run_dir / "report.md")
    os.symlink(victim_png, run_dir / "report.png")
    clean_exit(zlf("report", run_dir, cwd=tmp_path))
    assert victim_md.read_text() == "keep me\n" and victim_png.read_text() == "keep me too\n"
    assert not (run_dir / "report.md").is_symlink() and "zlf report" in (run_dir / "report.md").read_text()
    assert not (run_dir / "report.png").is_symlink()


def test_atomic_write_never_follows_a_planted_temporary_name(tmp_path):
    from zlf.rundir import write_atomic

    victim = tmp_path / "victim"
    victim.write_text("keep me\n")
    d = tmp_path / "campaign"
    d.mkdir()
    os.symlink(victim, d / ".campaign.json.tmp")  # where the temporary file used to go
    os.symlink(victim, d / "campaign.json")
    write_atomic(d / "campaign.json", "{}\n")
    assert victim.read_text() == "keep me\n"
    assert (d / "campaign.json").read_text() == "{}\n" and not (d / "campaign.json").is_symlink()


@pytest.mark.extensions("profile")
def test_profile_bundle_never_goes_through_a_profile_link(base_run, tmp_path):
    run_dir = copy_run(base_run, tmp_path / "received")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    os.symlink(elsewhere, run_dir / "profile")
    point = read_records(run_dir)[0]["point"]
    proc = zlf("profile", run_dir, point, cwd=tmp_path, env=fake_ncu_env(tmp_path), extensions="profile,shapes")
    one_line_error(proc, "symbolic link")
    assert list(elsewhere.iterdir()) == []


def _ir_trees(tmp_path):
    for side, body in (("A", "tt.dot a\n"), ("B", "tt.dot b\n")):
        kernel = tmp_path / side / "ir" / "1024" / "kern"
        kernel.mkdir(parents=True)
        (kernel / "k.ttir").write_text(body)


@pytest.mark.extensions("ir_dump")
def test_ir_diff_out_never_writes_through_a_planted_file_link(tmp_path):
    _ir_trees(tmp_path)
    victim = tmp_path / "victim"
    victim.write_text("keep me\n")
    (tmp_path / "d" / "1024" / "kern").mkdir(parents=True)
    os.symlink(victim, tmp_path / "d" / "1024" / "kern" / "k.ttir.diff")
    proc = zlf("ir-diff", "A", "B", "--out", "d", cwd=tmp_path, extensions="ir_dump")
    clean_exit(proc, rc=1)
    assert victim.read_text() == "keep me\n"
    assert "tt.dot b" in (tmp_path / "d" / "1024" / "kern" / "k.ttir.diff").read_text()


@pytest.mark.extensions("ir_dump")
def test_ir_diff_out_refuses_a_planted_folder_link(tmp_path):
    _ir_trees(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "d").mkdir()
    os.symlink(elsewhere, tmp_path / "d" / "1024")
    proc = zlf("ir-diff", "A", "B", "--out", "d", cwd=tmp_path, extensions="ir_dump")
    one_line_error(proc, "symbolic link")
    assert list(elsewhere.rglob("*")) == []


def test_ensure_dir_refuses_a_link_anywhere_below_its_root(tmp_path):
    from zlf.errors import UsageError
    from zlf.rundir import ensure_dir, write_atomic

    (tmp_path / "root" / "a").mkdir(parents=True)
    (tmp_path / "out").mkdir()
    os.symlink(tmp_path / "out", tmp_path / "root" / "a" / "b")
    with pytest.raises(UsageError, match="symbolic link"):
        ensure_dir(tmp_path / "root" / "a" / "b" / "c", tmp_path / "root")
    with pytest.raises(UsageError, match="symbolic link"):
        write_atomic(tmp_path / "root" / "a" / "b" / "f", "x", root=tmp_path / "root")
    assert list((tmp_path / "out").iterdir()) == []
    assert ensure_dir(tmp_path / "root" / "a" / "ok" / "c", tmp_path / "root").is_dir()  # control


# ============================================================================ 3 no credential in a record
@pytest.mark.parametrize("text, secret", [
    ("postgres://user:p@ss@word@db.local/x", "ss@word"),  # a password holding @
    ("https://cache.example/x?api_key=SECRETVAL&b=1", "SECRETVAL"),
    ("https://h/x?a=1&access_token=SECRETVAL", "SECRETVAL"),
    ("Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.c2lnbmF0dXJlc2VjcmV0", "eyJzdWIi"),
    ("aws_secret_access_key=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "wJalrXUtnFEMI"),
    ("--ray-address ray://admin:pa@SECRETPW@head:10001", "SECRETPW"),
    ("--password hunter2", "hunter2"),
    ("DB_PASS=hunter2", "hunter2"),
    ("MYSQL_PWD: hunter2", "hunter2"),
    ("https://ghp_abcdefghijklmnopqrstuvwxyz0123456789@github.com/o/r.git", "ghp_abcdef"),
    ("key: xoxb-123456789012-1234567890123-abcdefghijklmnopqrstuvwx", "xoxb-1234"),
    ("-----BEGIN RSA PRIVATE KEY-----", "BEGIN RSA PRIVATE"),
    ("stripe sk_live_abcdefghijklmnopqrstuvwx", "sk_live_abc"),
    ("gldt-abcdefghij0123456789", "gldt-abc"),
    ("curl -H 'X-Api-Key: SECRETVAL'", "SECRETVAL"),
])
def test_redaction_by_value_in_any_text(text, secret):
    from zlf.redact import redact_value

    assert secret not in redact_value(text) and "<redacted>" in redact_value(text)


@pytest.mark.parametrize("text", [
    "matmul/4096x4096x4096/float16", "KeyError: 'x'", "TRITON_CACHE_DIR=/home/u/.triton/cache",
    "GPU-5f7b2d1e-aaaa-bbbb-cccc-0123456789ab", "unexpected token at line 3", "hf_llama_attention/1x2/float16",
    "LLVM_PASS_PLUGIN_PATH=/opt/p.so", "see https://docs.example/x?page=2", "num_tokens=128",
    "AssertionError: tokens: 128, expected 64",
])
def test_redaction_leaves_what_is_no_credential(text):
    from zlf.redact import redact_value

    assert redact_value(text) == text


@pytest.mark.parametrize("name", ["DB_PASS", "MYSQLPWD", "REDIS_PW", "DBPASS", "PASS", "MY_CREDS"])
def test_credential_names_leave_the_environment(name):
    from zlf.redact import safe_environment

    assert name not in safe_environment({name: "x", "TRITON_DEBUG": "1"})


def test_meta_json_keeps_no_credential_of_the_command_line(tmp_path):
    """``zlf ir`` and every run write meta.json through RunDir.write_meta: argv values redacted."""
    from zlf.rundir import RunDir

    rd = RunDir(tmp_path)
    rd.write_meta({"command": ["zlf", "run", "--ray-address", "ray://admin:SECRETPW@head:10001", "--token", "SECRETTOK"],
                   "options": {"ray_address": "ray://admin:SECRETPW@head:10001"},
                   "environment": {"TRITON_URL": "https://u:p@SECRETPW2@h/x"}})
    text = (tmp_path / "meta.json").read_text()
    assert "SECRETPW" not in text and "SECRETTOK" not in text
    assert "ray://admin:<redacted>@head:10001" in text  # what is no secret stays readable


def test_run_records_log_meta_and_report_keep_no_credential(tmp_path):
    ops = tmp_path / "leaky_ops.py"
    ops.write_text('''
import torch, zlf
def make(shape, dtype, device):
    x = torch.ones(shape, dtype=getattr(torch, dtype), device=device)
    return (x, torch.empty_like(x))
def leak(x, out):
    raise RuntimeError("cannot reach postgres://svc:SECRETPW@db/x with Bearer SECRETBEARERTOKEN1")
leaky = zlf.Op(name="leaky", fn=leak, make_inputs=make, shapes=[(64,)], reference=lambda x, out: x,
               outputs=(1,), dtypes=["float32"])
''')
    env = {"TRITON_REMOTE": "https://me:p@SECRETPW3@cache/x", "TRITON_HDR": "token=SECRETTOKEN4"}
    proc = zlf("run", ops, "--out", "runs", cwd=tmp_path, env=env)
    clean_exit(proc, rc=1)
    run_dir = run_dir_from(proc.stdout, tmp_path)
    clean_exit(zlf("report", run_dir, cwd=tmp_path))
    for name in ("results.jsonl", "meta.json", "run.log", "report.md"):
        text = (run_dir / name).read_text()
        for secret in ("SECRETPW", "SECRETBEARER", "SECRETTOKEN4"):
            assert secret not in text, (name, secret)
    assert "cannot reach postgres://svc:<redacted>@db/x" in read_records(run_dir)[0]["error"]


@pytest.mark.parametrize("item, why", [("DB_PASS=x", "DB_PASS looks like a credential"),
                                       ("X=https://h/?api_key=SECRETVAL", "value of X looks like a credential"),
                                       ("X=Bearer SECRETBEARERVALUE", "value of X looks like a credential")])
def test_ab_refuses_a_side_variable_holding_a_credential(item, why, tmp_path):
    proc = zlf("ab", "add", "--a-env", item, "--b-env", "X=1", "--dry-run", cwd=tmp_path)
    one_line_error(proc, why)


# ============================================================================ 4 output injection
FORMULA_OPS = '''
import torch, zlf
def make(shape, dtype, device):
    x = torch.ones(shape, dtype=getattr(torch, dtype), device=device)
    return (x, torch.empty_like(x))
def bad(x, out):
    raise RuntimeError("=HYPERLINK(\\"http://evil\\",\\"x\\") | <script>alert(1)</script> [click](http://evil) `tick`")
def copy(x, out):
    out.copy_(x)
formula = zlf.Op(name="@SUM", fn=bad, make_inputs=make, shapes=[(64,)], reference=lambda x, out: x,
                 outputs=(1,), dtypes=["float32"])
fine = zlf.Op(name="fine", fn=copy, make_inputs=make, shapes=[(64,)], reference=lambda x, out: x,
              outputs=(1,), dtypes=["float32"])
'''


@pytest.fixture(scope="module")
def formula_run(tmp_path_factory) -> Path:
    cwd = tmp_path_factory.mktemp("formula")
    (cwd / "formula_ops.py").write_text(FORMULA_OPS)
    proc = zlf_core("run", "formula_ops.py", "--out", "runs", "--format", "csv", cwd=cwd)
    assert proc.returncode == 1, proc.stderr
    return cwd, run_dir_from(proc.stdout + proc.stderr, cwd), proc.stdout


def _csv_rows(text: str) -> list:
    return list(csv.reader(io.StringIO(text)))


def test_run_csv_cells_hold_no_formula(formula_run):
    _, _, out = formula_run
    rows = _csv_rows("\n".join(l for l in out.splitlines() if "," in l))
    cells = [c for row in rows for c in row]
    assert cells and not any(c.startswith(("=", "+", "-", "@", "\t", "\r")) for c in cells), cells
    assert any(c.startswith("'@SUM/") for c in cells)  # the op's name, shown as text


@pytest.mark.parametrize("cell, shown", [("=1+1", "'=1+1"), ("+cmd", "'+cmd"), ("-2+3+cmd|' /C calc'!A0", "'-2+3+cmd|' /C calc'!A0"),
                                         ("@SUM(A1)", "'@SUM(A1)"), ("\t=1", "'\\x09=1"), (" =1", "' =1"),
                                         ("-3.2", "-3.2"), ("-1e-3", "-1e-3"), ("+4", "+4"), ("plain", "plain")])
def test_csv_writer_neutralises_formulas_and_keeps_numbers(cell, shown):
    from zlf.output import render

    rows = _csv_rows(render(["a", "n"], [[cell, -3.2]], "csv"))
    assert rows[1] == [shown, "-3.2"]


def test_compare_csv_keeps_negative_deltas_numeric_and_neutralises_text(base_run, tmp_path):
    a, b = copy_run(base_run, tmp_path / "a"), copy_run(base_run, tmp_path / "b")

    def faster(docs):
        for d in docs:
            d["median_ms"] = d["median_ms"] / 2 if d.get("median_ms") else d.get("median_ms")
            d["samples"] = [s / 2 for s in d.get("samples") or []]
    rewrite_records(b, faster)
    for run_dir in (a, b):
        def spoil(docs):
            docs[0]["point"] = "=cmd|' /C calc'!A0"
        rewrite_records(run_dir, spoil)
    proc = zlf("compare", a, b, "--format", "csv", cwd=tmp_path)
    assert "Traceback" not in proc.stderr
    rows = _csv_rows(proc.stdout)
    header = rows[0]
    delta = header.index("delta_pct")
    deltas = [float(r[delta]) for r in rows[1:] if r[delta]]
    assert deltas and all(d < 0 for d in deltas)  # numbers, signs kept
    assert not any(c.startswith(("=", "@")) for r in rows for c in r)
    assert any(r[0].startswith("'=cmd") for r in rows[1:])


def _table_rows(page: str) -> list:
    return [l for l in page.splitlines() if l.startswith("|")]


def _columns(line: str) -> int:
    return len(re.findall(r"(?<!\\)\|", line))


def test_report_escapes_markdown_and_html_from_records(formula_run, tmp_path):
    cwd, run_dir, _ = formula_run
    received = copy_run(run_dir, tmp_path / "received")
    edit_meta(received, lambda m: m.__setitem__("device_name", "</details><img src=x onerror=alert(1)>"))
    clean_exit(zlf("report", received, cwd=tmp_path))
    page = (received / "report.md").read_text()
    assert "<script>" not in page and "<img" not in page and "[click](http://evil)" not in page
    assert "&lt;script&gt;" in page and "\\[click\\](http://evil)" in page  # shown, not run or linked
    points = [l for l in _table_rows(page) if l.startswith(("| @SUM/", "| fine/"))]
    head = next(l for l in _table_rows(page) if "error / markers" in l)
    assert points and all(_columns(l) == _columns(head) for l in points)  # a pipe in an error ends no cell
    assert page.count("<details>") == page.count("</details>")


def test_compare_markdown_escapes_record_text(formula_run, tmp_path):
    _, run_dir, _ = formula_run
    a, b = copy_run(run_dir, tmp_path / "a"), copy_run(run_dir, tmp_path / "b")
    for side in (a, b):
        rewrite_records(side, lambda docs: [d.__setitem__("point", d["point"] + "|x<script>y</script>") for d in docs])
    proc = zlf("compare", a, b, "--format", "markdown", cwd=tmp_path)
    assert "Traceback" not in proc.stderr
    assert "<script>" not in proc.stdout
    rows = _table_rows(proc.stdout)
    assert rows and len({_columns(l) for l in rows}) == 1


@pytest.mark.extensions("flaggems")
def test_sweep_resume_runs_no_command_line_a_received_sweep_json_names(tmp_path):
    """sweep.json's ops, FlagGems checkout and run arguments become the ops' command lines and
    imports: ``zlf sweep --resume`` of a received (or edited) folder ran them."""
    received = tmp_path / "received"
    received.mkdir()
    evil = tmp_path / "evil_checkout"
    (received / "sweep.json").write_text(json.dumps({
        "flaggems_dir": str(evil), "layout": "x", "ops": ["add"], "run_args": "--ext evil", "run_exts": ["evil"]}))
    proc = zlf("sweep", "--resume", received, cwd=tmp_path, env={"XDG_CONFIG_HOME": str(tmp_path / "cfg")},
               extensions="flaggems")
    one_line_error(proc, "not what zlf sweep wrote", "refusing to run them")
    assert not (received / "logs").exists() and not (received / "sweep.jsonl").exists()


def test_campaign_json_keeps_no_ray_password_and_still_verifies(tmp_path, monkeypatch):
    """``zlf ab --executor ray --ray-address ray://admin:pw@head:10001`` stored the password in
    campaign.json; redacted, the campaign still verifies on --resume, which asks for the address again."""
    from zlf.ab.campaign import Campaign
    from zlf.ab.cli import check_ray_address
    from zlf.errors import UsageError

    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "cfg"))
    data = {"format": 1, "sides": [], "ops": [], "scale": {"executor": "ray", "ray_address": "ray://admin:SECRETPW@head:10001"}}
    campaign = Campaign(tmp_path, data)
    campaign.seal()
    campaign.save()
    text = (tmp_path / "campaign.json").read_text()
    assert "SECRETPW" not in text and "ray://admin:<redacted>@head:10001" in text
    reopened = json.loads(text)
    from zlf.ab.campaign import _sign, signing_key
    assert reopened["signature"] == _sign(signing_key(create=False), reopened)  # what is signed is what is kept
    with pytest.raises(UsageError, match="give --ray-address again"):
        check_ray_address(reopened["scale"])
    check_ray_address({"ray_address": "ray://head:10001"})  # control: an address without a password


@pytest.mark.extensions("ir_dump")
def test_zlf_ir_meta_json_keeps_no_credential(tmp_path):
    """``zlf ir`` wrote its meta.json with no redaction at all."""
    env = {"TRITON_REMOTE": "https://me:p@SECRETPW@cache/x", "TRITON_HDR": "Authorization: Bearer SECRETBEARER1",
           "TRITON_API_TOKEN": "SECRETTOK", "TRITON_DEBUG": "1"}
    proc = zlf("ir", "add", "--target", "cuda:90", "--out", "aot", cwd=tmp_path, env=env, extensions="ir_dump")
    clean_exit(proc)
    (meta,) = tmp_path.glob("aot/*/meta.json")
    text = meta.read_text()
    assert "SECRET" not in text and "TRITON_API_TOKEN" not in text
    assert json.loads(text)["environment"]["TRITON_DEBUG"] == "1"  # what changes the IR is still recorded
