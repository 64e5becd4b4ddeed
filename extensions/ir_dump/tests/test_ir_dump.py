"""ir_dump: names, the ir/ tree, the crash path, ``zlf ir`` and ``zlf ir-diff`` -- all on CPU.

The real JIT path runs with the extension's fake cuda:90 driver: Triton specializes, autotunes
and compiles for Hopper (ptxas ships in the wheel); launches run nothing. ``zlf run`` reaches it
through a test backend registered by a tiny child script (a real process, so the crash test
can kill it).
"""
from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from zlf.testing import clean_env as _env, run_dir_from
from zlf_ir_dump import irtree
from zlf_ir_dump.naming import Variant, abbreviate, abbreviations, name_group

OPS = textwrap.dedent('''
    import os, signal
    import torch, triton, triton.language as tl, zlf

    @triton.jit
    def scale_kernel(x_ptr, out_ptr, EM, BLOCK_SIZE: tl.constexpr):
        offs = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
        m = offs < EM
        tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m) * 2, mask=m)

    def scale(x, out):
        n = x.numel()
        for em in (n, n - 1):  # EM divisible by 16, then not: two specializations
            scale_kernel[(triton.cdiv(em, 256),)](x, out, em, BLOCK_SIZE=256)

    @triton.jit
    def twin_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)
    twin_a = twin_kernel

    @triton.jit
    def twin_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):  # same name, other body
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) + 1, mask=offs < n)
    twin_b = twin_kernel

    def twins(x, out):
        for k in (twin_a, twin_b):
            k[(triton.cdiv(x.numel(), 256),)](x, out, x.numel(), BLOCK=256)

    @triton.autotune(configs=[triton.Config({"BLOCK_N": 128}, num_warps=4), triton.Config({"BLOCK_N": 256}, num_warps=4)],
                     key=["n"])
    @triton.jit
    def tuned_kernel(x_ptr, out_ptr, n, BLOCK_N: tl.constexpr):
        offs = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
        tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)

    def tuned(x, out):
        tuned_kernel[lambda meta: (triton.cdiv(x.numel(), meta["BLOCK_N"]),)](x, out, x.numel())

    def boom(x, out):
        scale(x, out)
        os.kill(os.getpid(), signal.SIGTERM)  # dies mid-run, as a CUDA error or a kill would

    def make(shape, dtype, device):
        x = torch.randn(shape, dtype=getattr(torch, dtype), device=device)
        return (x, torch.empty_like(x))

    scale_op = zlf.Op(name="scale", fn=scale, make_inputs=make, shapes=[(1024,)], dtypes=("float32", "float16"))
    twins_op = zlf.Op(name="twins", fn=twins, make_inputs=make, shapes=[(1024,)])
    tuned_op = zlf.Op(name="tuned", fn=tuned, make_inputs=make, shapes=[(512,)])
    boom_op = zlf.Op(name="boom", fn=boom, make_inputs=make, shapes=[(2048,)])
''')

CHILD = textwrap.dedent('''
    """zlf with a test backend that compiles for cuda:90 through the fake driver."""
    import sys
    from zlf import Backend, hookimpl
    from zlf.cli import main

    class FakeCuda(Backend):
        name = "fakecuda"
        description = "Triton JIT for cuda:90 on the host; launches run nothing"
        timer_name = "host_wall"
        ir_kinds = ("ttir", "ttgir", "llir", "ptx", "cubin")

        @classmethod
        def is_available(cls):
            return True

        def setup(self):
            from zlf_ir_dump import fake_driver
            fake_driver.activate("cuda:90")

    class Plugin:
        @hookimpl
        def register_backends(self):
            return [FakeCuda]

    sys.exit(main(sys.argv[1:], extra_plugins=[("fakecuda", Plugin())]))
''')

FAST = ["--warmup-ms", "1", "--rep-ms", "1"]


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    """A folder with the op file, the child script and a Triton cache shared by the module."""
    d = tmp_path_factory.mktemp("ir_dump")
    (d / "ops.py").write_text(OPS)
    (d / "child.py").write_text(CHILD)
    return d


def _child(work, *args, timeout=300):
    env = _env({"TRITON_CACHE_DIR": str(work / "triton_cache")})
    env.pop("TRITON_INTERPRET", None)
    return subprocess.run([sys.executable, str(work / "child.py"), *map(str, args)], cwd=work, env=env,
                          capture_output=True, text=True, timeout=timeout)


def _zlf(work, *args, timeout=300):
    env = _env({"TRITON_CACHE_DIR": str(work / "triton_cache")})
    env.pop("TRITON_INTERPRET", None)
    return subprocess.run([sys.executable, "-m", "zlf", *map(str, args)], cwd=work, env=env,
                          capture_output=True, text=True, timeout=timeout)


def _index(run_dir: Path) -> list:
    return irtree.read_index(Path(run_dir) / "ir")


def _files(run_dir: Path) -> list:
    root = Path(run_dir) / "ir"
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and p.parent != root)


# ----------------------------------------------------------------------------- names (pure)
def _v(h, kernel="k", constants=None, w=4, s=3, sig=None, spec=None):
    return Variant(kernel=kernel, hash=h, constants=constants or {}, num_warps=w, num_stages=s,
                   signature=sig or {"x_ptr": "*fp32", "n": "i32"}, specialization=spec or {})


def test_abbreviations_use_initials_and_keep_clashing_names_whole():
    assert abbreviate("BLOCK_SIZE_M") == "BSM" and abbreviate("BLOCK") == "BLOCK"
    assert abbreviations(["stride_am", "stride_ak", "BLOCK_M"]) == {"stride_am": "stride_am", "stride_ak": "stride_ak", "BLOCK_M": "BM"}


def test_names_list_only_differing_parameters_then_dtype_then_specialization_then_hash():
    variants = [
        _v("aa11", constants={"BLOCK_SIZE_M": 64, "GROUP": 8}, w=4),
        _v("bb22", constants={"BLOCK_SIZE_M": 128, "GROUP": 8}, w=8),
        _v("cc33", sig={"x_ptr": "*fp16", "n": "i32"}, constants={"BLOCK_SIZE_M": 64, "GROUP": 8}, w=4),
        _v("dd44", constants={"BLOCK_SIZE_M": 64, "GROUP": 8}, w=4, spec={"EM": "D"}),
        _v("ee55", constants={"BLOCK_SIZE_M": 64, "GROUP": 8}, w=4, spec={"EM": "D"}),
    ]
    g = name_group(variants)
    assert g.names["bb22"] == "BSM128_w8"
    assert g.names["cc33"] == "BSM64_w4__fp16"
    assert g.names["aa11"] == "BSM64_w4__fp32"
    assert g.names["dd44"] == "dd44__BSM64_w4__fp32__EMdiv16"
    assert g.names["ee55"] == "ee55__BSM64_w4__fp32__EMdiv16"
    assert g.legend == {"BSM": "BLOCK_SIZE_M"}
    # Deterministic: the order events arrived in does not matter.
    assert name_group(list(reversed(variants))).names == g.names


def test_names_fall_back_to_warps_and_stages():
    assert name_group([_v("a1")]).names == {"a1": "w4s3"}


# ----------------------------------------------------------------------------- irtree (pure)
def _tree(root: Path, files: dict) -> Path:
    for rel, text in files.items():
        (root / "ir" / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / "ir" / rel).write_text(text)
    (root / "ir" / "index.tsv").write_text("shape\tkernel\n")
    return root


def test_shape_status_and_op_counts(tmp_path):
    a = _tree(tmp_path / "A", {"64/k/w4s3.ttgir": "%0 = tt.dot %a, %b\n", "128/k/w4s3.ttgir": "same\n",
                               "256/k/w4s3.ttgir": "x\n"})
    b = _tree(tmp_path / "B", {"64/k/w4s3.ttgir": "%0 = ttng.warp_group_dot %a, %b\n%1 = ttg.convert_layout %0\n",
                               "128/k/w4s3.ttgir": "same\n", "512/k/w4s3.ttgir": "y\n"})
    assert irtree.shape_status(a, b) == {"128": "identical", "256": "only A", "512": "only B", "64": "changed"}
    assert irtree.shape_status(a, tmp_path) == {}
    (d,) = [d for d in irtree.diff_kernels(a / "ir", b / "ir") if d.status == "changed"]
    delta = irtree.op_count_delta(*(p.read_text() for p in (d.a_files["w4s3.ttgir"], d.b_files["w4s3.ttgir"])))
    assert delta[:2] == [("tt.dot", 1, 0), ("ttng.warp_group_dot", 0, 1)]
    assert ("ttg.convert_layout", 0, 1) in delta


# ----------------------------------------------------------------------------- the real JIT path
def test_run_dumps_launched_variants_with_collision_rules(work):
    proc = _child(work, "run", "ops.py::scale_op", "ops.py::twins_op", "ops.py::tuned_op", "--backend", "fakecuda",
                  "--ext", "ir_dump", "--ext", "fakecuda", "--ir", "ttgir,ptx", "--out", "runs", *FAST)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run_dir = run_dir_from(proc.stdout, work)
    files = _files(run_dir)
    # two dtypes, then the EM divisibility specialization
    for name in ("w4s3__fp16", "w4s3__fp16__EMdiv16", "w4s3__fp32", "w4s3__fp32__EMdiv16"):
        assert f"1024/scale_kernel/{name}.ttgir" in files and f"1024/scale_kernel/{name}.ptx" in files
    # two kernels of one name, nothing else tells them apart: hash prefix
    twins = [f for f in files if f.startswith("1024/twin_kernel/") and f.endswith(".ttgir")]
    assert len(twins) == 2 and all(f.split("/")[-1].split("__")[1] == "w4s3.ttgir" for f in twins)
    # autotune: the winner gets a file, named among launched variants only (a replaying side that
    # runs no sweep names it the same); the loser only a row in index.tsv
    assert [f for f in files if f.startswith("512/")] == ["512/tuned_kernel/w4s3.ptx", "512/tuned_kernel/w4s3.ttgir"]
    tuned = {r["status"]: r for r in _index(run_dir) if r["shape"] == "512"}
    assert tuned["sweep loser"]["file"] == "" and "BLOCK_N=256" in tuned["sweep loser"]["constexprs"]
    assert tuned["launched"]["sweep_launches"] == "1" and "BLOCK_N=128" in tuned["launched"]["constexprs"]
    rows = {(r["shape"], r["name"]): r for r in _index(run_dir) if r["status"] == "launched"}
    scale = rows[("1024", "w4s3__fp32__EMdiv16")]
    assert scale["launches"] == "1" and "EM:D" in scale["specialization"] and scale["constexprs"] == "BLOCK_SIZE=256"
    assert len(scale["hash"]) == 64
    assert "tt.divisibility = 16" in (run_dir / "ir/1024/scale_kernel/w4s3__fp32__EMdiv16.ttgir").read_text()
    assert "EM" in (run_dir / "ir/naming.md").read_text()  # the specialization suffix is explained


def test_a_killed_run_still_leaves_its_ir(work):
    proc = _child(work, "run", "ops.py::scale_op", "ops.py::boom_op", "--dtype", "float32", "--backend", "fakecuda",
                  "--ext", "ir_dump", "--ext", "fakecuda", "--out", "crash", *FAST)
    assert proc.returncode == 143, proc.stdout + proc.stderr  # SIGTERM stops zlf run like Ctrl-C
    (run_dir,) = (work / "crash").iterdir()
    assert json.loads((run_dir / "meta.json").read_text())["status"] == "terminated"
    files = _files(run_dir)
    assert "1024/scale_kernel/w4s3__EMdiv16.ttgir" in files  # the point finished before the kill
    assert "2048/scale_kernel/w4s3__EMdiv16.ttgir" in files  # launched by the point that died
    assert "at signal 15" in (run_dir / "run.log").read_text()


# ----------------------------------------------------------------------------- zlf ir / ir-diff
def test_zlf_ir_compiles_for_cuda90_and_ir_diff_compares(work, tmp_path, capsys):
    args = ("ir", "ops.py::scale_op", "ops.py::tuned_op", "--target", "cuda:90", "--ext", "ir_dump", "--out", "aot")
    first = _zlf(work, *args)
    assert first.returncode == 0, first.stdout + first.stderr
    assert first.stdout.strip().splitlines()[-1].startswith("run dir: ")
    a = run_dir_from(first.stdout, work)
    assert "1024/scale_kernel/w4s3__fp16__EMdiv16.ttgir" in _files(a)
    assert "512/tuned_kernel/w4s3.ttgir" in _files(a)
    assert "ttng.warp_group" not in (a / "ir/1024/scale_kernel/w4s3__fp32.ttgir").read_text()
    assert 'ttg.target = "cuda:90"' in (a / "ir/1024/scale_kernel/w4s3__fp32.ttgir").read_text()
    second = _zlf(work, *args)
    b = run_dir_from(second.stdout, work)
    assert _files(a) == _files(b)  # same names on both sides: diff -r lines up

    from zlf.cli import main

    assert main(["ir-diff", str(a), str(b), "--ext", "ir_dump", "--out", str(tmp_path / "d")]) == 0
    assert irtree.shape_status(a, b) == {"512": "identical", "1024": "identical"}
    changed = shutil.copytree(b, tmp_path / "B")
    f = changed / "ir/1024/scale_kernel/w4s3__fp32.ttgir"
    f.write_text(f.read_text() + "    %99 = ttg.convert_layout %x : a -> b\n")
    capsys.readouterr()
    assert main(["ir-diff", str(a), str(changed), "--ext", "ir_dump", "--out", str(tmp_path / "d")]) == 1
    out = capsys.readouterr().out
    assert "ttg.convert_layout 0→1" in out and "1 changed" in out
    assert (tmp_path / "d/1024/scale_kernel/w4s3__fp32.ttgir.diff").read_text().startswith("--- A/1024")
    assert irtree.shape_status(a, changed) == {"512": "identical", "1024": "changed"}


def test_zlf_ir_compiles_with_triton_interpret_exported_and_says_it_ignored_it(work):
    """A shell that exports TRITON_INTERPRET=1 (CPU debugging) still compiles for the GPU target:
    before, Triton was imported interpreted and every point failed with a bare AssertionError."""
    env = _env({"TRITON_CACHE_DIR": str(work / "triton_cache"), "TRITON_INTERPRET": "1"})
    # the built-in matmul: its tl.dot makes Triton import Gluon, whose import refused the
    # interpreted functions of triton.language that an early import had made
    done = subprocess.run([sys.executable, "-m", "zlf", "ir", "matmul", "--dtype", "float16", "--target", "cuda:90",
                           "--ext", "ir_dump", "--out", "aot_interp"], cwd=work, env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    run = run_dir_from(done.stdout, work)
    assert sum(f.endswith(".ttgir") and "/matmul_kernel/" in f for f in _files(run)) == 4  # one per shape
    meta = json.loads((run / "meta.json").read_text())
    assert meta["ignored_environment"] == {"TRITON_INTERPRET": "1"} and meta["errors"] == {}


def test_zlf_ir_compiles_in_a_fresh_process_when_triton_was_imported_interpreted(work):
    """Triton imported with TRITON_INTERPRET before the command runs (here by the caller, as an
    in-process cpu run does) cannot compile for a GPU in this process: zlf ir runs again in a
    fresh one and its IR is written -- not one AssertionError per point, not a refusal."""
    env = _env({"TRITON_CACHE_DIR": str(work / "triton_cache"), "TRITON_INTERPRET": "1"})
    script = ("import sys, triton\nfrom zlf.cli import main\n"
              "rc = main(['ir', 'ops.py::scale_op', '--target', 'cuda:90', '--ext', 'ir_dump', '--out', 'fresh'])\n"
              "import os\nassert os.environ['TRITON_INTERPRET'] == '1'\nsys.exit(rc)")
    done = subprocess.run([sys.executable, "-c", script], cwd=work, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    run = run_dir_from(done.stdout, work)
    assert "1024/scale_kernel/w4s3__fp32.ttgir" in _files(run)
    assert json.loads((run / "meta.json").read_text())["command"][:3] == ["zlf", "ir", "ops.py::scale_op"]


#: an in-process caller's extension that resolves ``myscale`` to ops.py's op: the class comes from
#: a module next to the caller's script (``plugins_here.py``), or is defined in the script itself
PLUGIN_CLASS = textwrap.dedent("""\
    import threading, zlf

    class Resolver:
        def __init__(self, lock=False):
            self.lock = threading.Lock() if lock else None  # a lock cannot be pickled

        @zlf.hookimpl
        def resolve_ops(self, spec, session):
            if spec != "myscale":
                return None
            return session.hooks.resolve_ops("ops.py::scale_op", session)
    """)


def _plugged_caller(work, where, name, lock=False):
    """Run a caller script that imports Triton interpreted, then calls zlf ir with its plugin."""
    folder = work / f"caller_{name}"
    folder.mkdir()
    (folder / "plugins_here.py").write_text(PLUGIN_CLASS)
    head = "from plugins_here import Resolver\n" if where == "module" else PLUGIN_CLASS
    (folder / "caller.py").write_text(
        "import os, sys\nos.environ['TRITON_INTERPRET'] = '1'\nimport triton.language\n"
        "del os.environ['TRITON_INTERPRET']\n" + head + "from zlf.cli import main\n"
        f"sys.exit(main(['ir', 'myscale', '--target', 'cuda:90', '--out', {str(work / name)!r}],\n"
        f"              extra_plugins=[('resolver', Resolver(lock={lock}))]))\n")
    env = _env({"TRITON_CACHE_DIR": str(work / "triton_cache")})
    env.pop("TRITON_INTERPRET", None)
    return subprocess.run([sys.executable, str(folder / "caller.py")], cwd=work, env=env, capture_output=True,
                          text=True, timeout=300, stdin=subprocess.DEVNULL)


@pytest.mark.parametrize("where", ["script", "module"])
def test_zlf_ir_fresh_process_takes_the_callers_plugins_along(work, where):
    """The fresh process zlf ir runs in after Triton was imported interpreted registered no
    extension passed to main(): an op such a plugin resolves was unknown there. The plugin goes
    along, whether its class is the caller script's own or comes from a module beside it."""
    done = _plugged_caller(work, where, f"plugged_{where}")
    assert done.returncode == 0, done.stdout + done.stderr
    run = run_dir_from(done.stdout, work)
    assert "1024/scale_kernel/w4s3__fp32.ttgir" in _files(run)


def test_zlf_ir_refuses_in_one_line_a_plugin_that_cannot_go_to_the_fresh_process(work):
    done = _plugged_caller(work, "script", "plugged_lock", lock=True)
    assert done.returncode == 2, done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("zlf: error: zlf ir compiles in a fresh process here"), done.stderr
    assert "extension 'resolver' passed to main()" in lines[0] and "lock" in lines[0], done.stderr
    assert not (work / "plugged_lock").exists()


#: Triton 3.6 keeps no registry of its JIT functions (3.9 does): a stand-in that Triton can still
#: fill and read, but that cannot be listed, hides it
NO_REGISTRY = textwrap.dedent("""\
    import triton.runtime.jit as jit
    class Unlisted:
        def __init__(self): self.kept = {}
        def __setitem__(self, key, fn): self.kept[key] = fn
        def __getitem__(self, key): return self.kept[key]
        def __contains__(self, key): return key in self.kept
    jit._triton_jit_function_registry = Unlisted()
    """)


@pytest.mark.parametrize("registry", ["kept", "absent"])
def test_zlf_ir_in_process_gives_the_process_back(work, registry):
    """Called in-process, zlf ir leaves no fake driver active, no kernel compiled for its target in
    a JIT cache, and TRITON_INTERPRET as it was: before, the fake driver stayed and a later
    command's launches ran nothing. On a Triton without a registry of JIT functions (3.6, the GPU
    machine's) the compiled kernels stayed cached, and a later real run launched them with the
    fake loader's handles: every matmul point NaN or unwritten."""
    env = _env({"TRITON_CACHE_DIR": str(work / "triton_cache")})
    env.pop("TRITON_INTERPRET", None)
    script = ((NO_REGISTRY if registry == "absent" else "") + "import os, sys\nfrom zlf.cli import main\n"
              "assert main(['ir', 'ops.py::scale_op', '--target', 'cuda:90', '--ext', 'ir_dump', '--out', 'given_back']) == 0\n"
              "from triton.runtime import driver\n"
              "assert driver._active is None, driver._active\n"
              "assert 'TRITON_INTERPRET' not in os.environ\n"
              "assert sys.modules['zlf_user_ops_ops'].scale_kernel.device_caches == {}\n")
    done = subprocess.run([sys.executable, "-c", script], cwd=work, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_cpu_run_after_an_in_process_zlf_ir_interprets_tritons_own_functions(work, tmp_path):
    """zlf ir imports Triton compiled; a later in-process cpu run of a kernel that calls
    triton.language's own JIT functions (tl.max, tl.sum in the built-in softmax) failed every
    point with "Cannot call @triton.jit'd outside of the scope of a kernel"."""
    env = _env({"TRITON_CACHE_DIR": str(work / "triton_cache")})
    env.pop("TRITON_INTERPRET", None)
    script = ("import sys\nfrom zlf.cli import main\n"
              "assert main(['ir', 'softmax', '--dtype', 'float32', '--target', 'cuda:90', '--ext', 'ir_dump']) == 0\n"
              "sys.exit(main(['run', 'softmax', '--dtype', 'float32', '--backend', 'cpu', '--warmup-ms', '0', "
              "'--rep-ms', '1']))")
    done = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "FAILED" not in done.stdout + done.stderr


def test_zlf_ir_refuses_an_op_file_that_assigns_triton_interpret(work):
    """An op file that assigns TRITON_INTERPRET=1 (not setdefault) makes its kernels interpreted:
    nothing would compile, and zlf ir said '0 launched variants' with exit 0."""
    (work / "assigns.py").write_text('import os\nos.environ["TRITON_INTERPRET"] = "1"\n' + OPS)
    done = _zlf(work, "ir", "assigns.py::scale_op", "--target", "cuda:90", "--ext", "ir_dump", "--out", "assigns")
    assert done.returncode == 2, done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("zlf: error: TRITON_INTERPRET=1 was set"), done.stderr
    assert not (work / "assigns").exists()


@pytest.mark.parametrize("text", ["cuda:80", "cuda:90", "cuda:100", "hip:gfx90a", "hip:gfx942", "hip:gfx1100"])
def test_targets_triton_compiles_for_are_accepted(text):
    from zlf_ir_dump.fake_driver import parse_target

    target = parse_target(text)
    assert f"{target.backend}:{target.arch}" == text


#: Triton's compile as Triton 3.9 on cuda:101 behaves, patched at start-up (sitecustomize) of each
#: Python process with this PYTHONPATH: zlf's and the one its probe compiles in
PTXAS_REFUSES = """
import os, triton

def compile(src, target=None, options=None, **kw):  # Triton 3.9 on cuda:101: ptxas-blackwell knows no sm_101a
    print("Internal Triton PTX codegen error\\n`ptxas` stderr:\\n"
          "ptxas-blackwell fatal   : Value 'sm_101a' is not defined for option 'gpu-name'\\n.target sm_101a")
    os.write(2, b"error: a reproducer the compiler wrote itself\\n")
    raise RuntimeError("PTXAS error: Internal Triton PTX codegen error")

triton.compile = compile  # the real JIT path of the points is not this attribute
"""


def test_a_target_the_compiler_refuses_is_one_line_before_anything_is_written(tmp_path):
    """An arch that passes --target's check (ptxas lists sm_101) but that Triton's compiler cannot
    build for (it hands sm_101a to ptxas-blackwell) was one compiler dump per point in a run dir:
    zlf ir compiles a probe kernel first and turns its failure into one line, the compiler's
    output (its PTX on stdout, its diagnostics on stderr) kept out of the terminal."""
    (tmp_path / "faulty").mkdir()
    (tmp_path / "faulty" / "sitecustomize.py").write_text(PTXAS_REFUSES)
    env = _env({"TRITON_CACHE_DIR": str(tmp_path / "triton_cache"), "PYTHONPATH": str(tmp_path / "faulty")})
    env.pop("TRITON_INTERPRET", None)
    done = subprocess.run([sys.executable, "-m", "zlf", "ir", "add", "--dtype", "float32", "--target", "cuda:90",
                           "--ext", "ir_dump", "--out", "out"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=300, stdin=subprocess.DEVNULL)
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stdout == ""
    assert done.stderr.splitlines() == ["zlf: error: --target 'cuda:90': Triton %s cannot compile for it "
                                        "(Value 'sm_101a' is not defined for option 'gpu-name')"
                                        % __import__("triton").__version__], done.stderr
    assert not (tmp_path / "out").exists()


def test_the_default_triton_cache_is_named_when_it_cannot_be_made(work, tmp_path):
    (tmp_path / "home").write_text("a file, not a folder\n")
    env = _env({"TRITON_HOME": str(tmp_path / "home")})
    for name in ("TRITON_INTERPRET", "TRITON_CACHE_DIR"):
        env.pop(name, None)
    done = subprocess.run([sys.executable, "-m", "zlf", "ir", "ops.py::scale_op", "--ext", "ir_dump", "--out",
                           str(tmp_path / "out")], cwd=work, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "the Triton cache (TRITON_CACHE_DIR unset)" in lines[0], done.stderr
    assert not (tmp_path / "out").exists()


def test_ir_guard_counts_like_ir_diff():
    from zlf_ir_dump.campaign import guard_line as ir_guard_line

    line = ir_guard_line("mm", {"a": "identical", "b": "identical", "c": "changed", "d": "changed"})
    assert "on 2 of 4 shapes" in line and "2 identical, 2 changed, 0 only A, 0 only B" in line
    assert "one side only" not in line
    line = ir_guard_line("mm", {"a": "changed", "b": "only B"})
    assert "0 identical, 1 changed, 0 only A, 1 only B" in line
    assert ir_guard_line("add", {"a": "identical"}).startswith("!!! add: the switch changed NO compiled code")


# ----------------------------------------------------------------------------- the format of index.tsv
def test_the_index_schema_ships_with_the_extension_and_refuses_what_readers_could_not_use():
    import jsonschema

    from zlf import readers, schemas
    from zlf_ir_dump import schema

    assert schema.NAME not in schemas.NAMES  # core knows no extension's file
    jsonschema.validators.validator_for(schema.load()).check_schema(schema.load())
    row = {"shape": "1024", "kernel": "k", "name": "w4s3", "file": "", "status": "launched", "launches": "1",
           "hash": "abc"}
    with pytest.raises(jsonschema.ValidationError):  # a launched variant always has its file
        schema.validate_row(row)
    schema.validate_row({**row, "file": "1024/k/w4s3"})


def test_a_written_run_directory_with_an_ir_index_is_checked_row_by_row(zlf_run_dir):
    import jsonschema

    from zlf import readers, schemas
    from zlf_ir_dump import schema

    run = zlf_run_dir({"add/1024/float32": 1.0})
    assert schema.check_index(run) == 0  # no ir/ tree: nothing to check
    (run / "ir").mkdir()
    header = "shape\tkernel\tname\tfile\tstatus\tlaunches\thash"
    (run / "ir" / "index.tsv").write_text(f"{header}\n1024\tadd_kernel\tw4\t1024/add_kernel/w4\tlaunched\t1\tab12\n")
    assert schemas.check_run_dir(run) == 2 and schema.check_index(run) == 1
    (run / "ir" / "index.tsv").write_text(f"{header}\n1024\tadd_kernel\tw4\t\tlaunched\t1\tab12\n")
    with pytest.raises(jsonschema.ValidationError):
        schema.check_index(run)
    # a row of the wrong width: zlf's bounded reader's one line, naming the file and the line
    (run / "ir" / "index.tsv").write_text(f"{header}\n1024\tadd_kernel\n")
    with pytest.raises(readers.BadFile, match=r"index\.tsv.*2.*2 cells under a header of 7"):
        schema.check_index(run)
