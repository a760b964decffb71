"""build.json, content-hashed names, JIT builds, the cache and AOT (CPU: nvcc, no GPU needed)."""

from __future__ import annotations

import importlib
import multiprocessing as mp
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cake_rmsnorm_det import aot, programs as P

ROOT = Path(__file__).resolve().parent.parent


def test_every_program_name_matches_its_content():
    assert P.problems() == []
    names = [p.name for p in P.programs()]
    assert len(names) == len(set(names))
    for p in P.programs():
        name, headers = P.content_name(ROOT / p.kernel, ROOT / p.binding)
        assert name == p.name
        assert headers and all(h.startswith("csrc/include/cake/") for h in headers)
        assert p.kernel.endswith(f"{p.name}_kernel.cu") and p.binding.endswith(f"{p.name}_binding.cu")


def test_verify_command_passes():
    r = subprocess.run([sys.executable, "-m", "cake_rmsnorm_det.programs", "verify"], cwd=ROOT,
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "0 problems" in r.stdout


@pytest.fixture
def tree_copy(tmp_path, monkeypatch):
    """A copy of build.json and csrc/ that the tests may change."""
    shutil.copytree(ROOT / "csrc", tmp_path / "csrc")
    shutil.copy(ROOT / "build.json", tmp_path / "build.json")
    monkeypatch.setattr(P, "source_root", lambda: tmp_path)
    return tmp_path


def test_a_changed_byte_is_a_mismatch(tree_copy):
    prog = P.program_by_key("bwd_h4096")
    k = tree_copy / prog.kernel
    k.write_text(k.read_text() + "\n// one more line\n")
    bad = P.problems()
    assert any("bwd_h4096" in b and "rehash" in b for b in bad), bad


def test_a_changed_header_renames_every_program_that_includes_it(tree_copy):
    hdr = tree_copy / "csrc" / "include" / "cake" / "reduce.cuh"
    hdr.write_text(hdr.read_text() + "\n// changed\n")
    assert len(P.problems()) >= len(P.programs())
    changed = P.rehash()
    assert {k for k, _, _ in changed} == {p.key for p in P.programs()}
    assert P.problems() == []
    for key, old, new in changed:
        assert old != new and (tree_copy / "csrc" / f"{new}_kernel.cu").exists()
        assert not (tree_copy / "csrc" / f"{old}_kernel.cu").exists()


def test_register_names_a_new_program(tree_copy):
    k = tree_copy / "new_kernel.cu"
    b = tree_copy / "new_binding.cu"
    k.write_text('#include "cake/backward.cuh"\n\nCAKE_BACKWARD_PROGRAM(3072)\n')
    b.write_text('#include "cake/binding.cuh"\n\nCAKE_BACKWARD_BINDING()\n')
    prog = P.register("bwd_h3072", "bwd", 3072, k, b)
    assert prog.name.startswith(P.PREFIX) and len(prog.name) == len(P.PREFIX) + P.HASH_DIGITS
    assert (tree_copy / prog.kernel).exists() and not k.exists()
    assert P.program_by_key("bwd_h3072").name == prog.name
    assert P.problems() == []
    stray = tree_copy / "csrc" / f"{P.PREFIX}{'0' * 20}_kernel.cu"
    stray.write_text("// not listed\n")
    assert any("not listed" in x for x in P.problems())


def test_missing_nvcc_says_where_it_looked(monkeypatch):
    monkeypatch.setenv("CUDA_HOME", "/nonexistent/cuda")
    monkeypatch.delenv("CUDA_PATH", raising=False)
    monkeypatch.setattr(P.shutil, "which", lambda name: None)
    monkeypatch.setattr(P, "FALLBACK_NVCC", (Path("/nonexistent/nvcc"),))
    with pytest.raises(RuntimeError) as e:
        P.find_nvcc()
    msg = str(e.value)
    assert "/nonexistent/cuda/bin/nvcc" in msg and "PATH" in msg and "CUDA_HOME" in msg


def test_unsupported_arch_names_the_supported_ones(monkeypatch):
    with pytest.raises(RuntimeError, match="sm_90a"):
        P.arch_of_capability((8, 0))
    monkeypatch.setenv("CAKE_RMSNORM_DET_ARCH", "sm_80")
    with pytest.raises(RuntimeError, match="sm_100a"):
        P.current_arch()
    assert P.arch_of_capability((10, 3)) == "sm_103a"


def test_cudart_is_found_under_the_toolkit():
    dirs = P.cudart_dirs()
    assert dirs, f"no libcudart under {P.cuda_home()}"


def test_read_only_cache_falls_back_with_a_warning(tmp_path, monkeypatch):
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    monkeypatch.setenv("CAKE_RMSNORM_DET_CACHE", str(blocker / "cache"))  # parent is a file
    with pytest.warns(RuntimeWarning, match="not writable"):
        root = P.cache_root()
    assert root.exists() and os.access(root, os.W_OK)


def test_cache_key_covers_arch_flags_and_toolchain():
    p = P.program_by_key("fwd_h256")
    keys = {P.cache_key(p, a) for a in P.SUPPORTED_ARCHS}
    assert len(keys) == 3
    q = P.Program(**{**p.__dict__, "nvcc_flags": p.nvcc_flags + ("-DX",)})
    assert P.cache_key(q, "sm_90a") != P.cache_key(p, "sm_90a")


# ---------------------------------------------------------------------------------------------
# Builds (nvcc, no GPU)

@pytest.fixture(scope="session")
def aot_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("aot")
    res = aot.build_all(["sm_90a"], out, jobs=2)
    assert all(not r[3].startswith("FAILED") for r in res), [r for r in res if r[3].startswith("FAILED")]
    return out


def test_aot_builds_every_program_for_sm90a_and_each_loads(aot_dir):
    import tvm_ffi

    for p in P.programs():
        lib = aot_dir / "sm_90a" / f"{p.name}.so"
        assert P._library_ok(lib), f"{p.key}: no valid library"
        mod = tvm_ffi.load_module(str(lib))
        fn = getattr(mod, p.entry)
        assert fn is not None, f"{p.key}: entry point {p.entry} missing"


def test_aot_builds_every_program_for_sm100a_and_two_for_sm103a(tmp_path):
    """Blackwell builds compile from the same sources (they are never run here)."""
    res = aot.build_all(["sm_100a"], tmp_path, jobs=2)
    assert len(res) == sum("sm_100a" in p.archs for p in P.programs())
    assert all(not r[3].startswith("FAILED") for r in res), [r for r in res if r[3].startswith("FAILED")]
    res = aot.build_all(["sm_103a"], tmp_path, jobs=2, only=["bwd_h4096", "fwd_h4096"])
    assert len(res) == 2 and all(not r[3].startswith("FAILED") for r in res), res


def test_runtime_prefers_the_aot_folder(aot_dir, monkeypatch, tmp_path):
    monkeypatch.setenv("CAKE_RMSNORM_DET_AOT_DIR", str(aot_dir))
    monkeypatch.setenv("CAKE_RMSNORM_DET_CACHE", str(tmp_path / "empty-cache"))
    p = P.program_by_key("bwd_h256")
    assert P.find_built(p, "sm_90a") == aot_dir / "sm_90a" / f"{p.name}.so"


def _bench_module(name: str):
    """bench/<name>.py as a module (bench/ is scripts, not a package)."""
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.pop(0)


def test_load_order_finds_a_load_issued_after_loaded_data_is_used():
    """The scan behind the next test: a load whose issue follows the first use of an earlier
    load's registers is late (two DRAM round trips in a row), a load from a loaded address too."""
    lo = _bench_module("load_order")
    clean = ["LDG.E.128 R4, desc[UR4][R4.64]", "LDG.E R8, desc[UR4][R2.64]",
             "IMAD.U32 R0, R4, 0x10000, RZ", "FMUL R1, R0, R8", "SHFL.BFLY PT, R2, R1, 0x1, 0x1f",
             "LDG.E R9, desc[UR4][R1.64]"]  # past the first shuffle: a loop's concern, not the prologue's
    assert lo.late_loads(clean) == (2, [])
    late = ["LDG.E.128 R4, desc[UR4][R4.64]", "LOP3.LUT R12, R7, 0xffff0000, RZ, 0xc0, !PT",
            "@!P0 LDG.E R31, desc[UR4][R2.64]"]  # R7: the 16-byte load's last register
    assert lo.late_loads(late) == (1, ["@!P0 LDG.E R31, desc[UR4][R2.64]"])
    chained = ["LDG.E.64 R2, desc[UR4][R10.64]", "LDG.E R5, desc[UR4][R2.64]"]  # a loaded address
    assert lo.late_loads(chained) == (1, ["LDG.E R5, desc[UR4][R2.64]"])


def test_no_backward_row_or_fused_kernel_waits_on_one_load_before_issuing_another(aot_dir):
    """Round 45's load order (backward_fused.cuh fused_dx_rows: rstd, the rows, then the
    weights): before it, ptxas issued rstd's load after a BF16 weight's unpacking in 88 of the
    tuned backward row / fused kernels, and the one-row call waited out two DRAM round trips
    (0.1-0.2 us on an H100). Every such kernel of every tuned backward program, read from its
    sm_90a library's SASS, issues each prologue load before any loaded value is used."""
    lo = _bench_module("load_order")
    cuobjdump = lo.find_cuobjdump()
    if cuobjdump is None:
        pytest.skip("no cuobjdump (the test extra installs nvidia-cuda-cuobjdump)")
    for p in P.programs():
        if not p.key.startswith("bwd_h"):
            continue
        scanned = lo.scan(aot_dir / "sm_90a" / f"{p.name}.so", cuobjdump)
        assert any("backward_fused_kernel" in name for name, _, _ in scanned), f"{p.key}: no fused kernel read"
        flagged = [(name, late) for name, _, late in scanned if late]
        assert not flagged, f"{p.key}: loads issued after loaded data is used: {flagged}"


def _build_in_child(out: str, key: str, q) -> None:
    try:
        lib = P.build_program(P.program_by_key(key), "sm_90a", Path(out))
        q.put(str(lib))
    except Exception as e:  # pragma: no cover - reported to the parent
        q.put(f"ERROR {e}")


def test_processes_building_at_once_build_once(tmp_path):
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=_build_in_child, args=(str(tmp_path), "fwd_h512", q)) for _ in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(300)
    got = [q.get(timeout=5) for _ in procs]
    assert len(set(got)) == 1 and not got[0].startswith("ERROR"), got
    assert len((tmp_path / "build.log").read_text().splitlines()) == 1, "built twice"
    import tvm_ffi

    assert tvm_ffi.load_module(got[0]).forward is not None


def test_truncated_library_is_detected_and_rebuilt(tmp_path):
    p = P.program_by_key("fwd_h256")
    lib = P.build_program(p, "sm_90a", tmp_path)
    data = lib.read_bytes()
    lib.write_bytes(data[: len(data) // 3])
    assert not P._library_ok(lib)
    lib2 = P.build_program(p, "sm_90a", tmp_path)
    assert lib2 == lib and P._library_ok(lib) and len(lib.read_bytes()) > len(data) // 3
    assert len((tmp_path / "build.log").read_text().splitlines()) == 2
    import tvm_ffi

    assert tvm_ffi.load_module(str(lib)).forward is not None


def _hold_lock_forever(path: str, ready) -> None:
    from filelock import FileLock

    FileLock(path).acquire()
    ready.set()
    time.sleep(3600)


def test_a_killed_build_leaves_a_lock_the_next_process_recovers(tmp_path):
    p = P.program_by_key("fwd_h256")
    ctx = mp.get_context("spawn")
    ready = ctx.Event()
    lock = tmp_path / f"{p.name}.lock"
    holder = ctx.Process(target=_hold_lock_forever, args=(str(lock), ready))
    holder.start()
    assert ready.wait(120), "the lock holder never took the lock"
    os.kill(holder.pid, signal.SIGKILL)     # dies holding the lock; the lock file stays behind
    holder.join()
    assert lock.exists()
    t0 = time.time()
    lib = P.build_program(p, "sm_90a", tmp_path)
    assert P._library_ok(lib) and time.time() - t0 < 300



@pytest.fixture
def experiment_tree():
    """bench/experiment_tree.py as a module (it needs GNU patch)."""
    if shutil.which("patch") is None:
        pytest.skip("GNU patch not installed")
    return _bench_module("experiment_tree")


def test_every_experiment_patch_applies_to_the_routed_sources(experiment_tree, tmp_path):
    """bench/experiments/*.patch are timed as trees beside the routed programs: each must still
    apply to the current sources and change a header (a stale one fails here, not on the GPU)."""
    patches = sorted((ROOT / "bench" / "experiments").glob("*.patch"))
    if not patches:
        pytest.skip("no experiment pending in bench/experiments/")
    for p in patches:
        out = tmp_path / p.stem
        experiment_tree.make_tree(out, [p])
        changed = [h for h in (out / "include" / "cake").iterdir()
                   if h.read_bytes() != (ROOT / "csrc" / "include" / "cake" / h.name).read_bytes()]
        assert changed, f"{p.name} changed no header"
        assert not list(out.rglob("*.orig")) and not list(out.rglob("*.rej"))


def test_an_experiment_patch_that_does_not_apply_leaves_no_tree(experiment_tree, tmp_path):
    bad = tmp_path / "bad.patch"
    bad.write_text("--- a/csrc/include/cake/vec.cuh\n+++ b/csrc/include/cake/vec.cuh\n@@ -1,1 +1,1 @@\n"
                   "-this line is not in the file\n+nor this one\n")
    with pytest.raises(SystemExit, match="does not apply"):
        experiment_tree.make_tree(tmp_path / "tree", [bad])
    assert not (tmp_path / "tree").exists()


def test_a_commits_tree_is_its_programs(experiment_tree, tmp_path):
    """--rev: the tree of a commit's programs (the programs before a change, timed beside it); HEAD's
    is the working tree's where the program sources are unchanged since."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--", "build.json", "csrc"],
                           capture_output=True, text=True, check=True).stdout.strip()
    if dirty:
        pytest.skip("the program sources differ from HEAD's")
    experiment_tree.make_tree(tmp_path / "head", [], rev="HEAD")
    experiment_tree.make_tree(tmp_path / "work", [])
    files = sorted(f.relative_to(tmp_path / "work") for f in (tmp_path / "work").rglob("*") if f.is_file())
    assert files and files == sorted(f.relative_to(tmp_path / "head") for f in (tmp_path / "head").rglob("*")
                                     if f.is_file())
    assert all((tmp_path / "head" / f).read_bytes() == (tmp_path / "work" / f).read_bytes() for f in files)
    with pytest.raises(SystemExit, match="git archive"):
        experiment_tree.make_tree(tmp_path / "none", [], rev="no-such-revision")
    assert not (tmp_path / "none").exists()


def test_sass_identity_compares_kernels_byte_by_byte(experiment_tree, tmp_path, capsys):
    """bench/sass_identity.py: a tree of the routed sources compiles to the same kernels as the
    repository; a kernel it cannot find under its name counts as gone and fails the check."""
    sass_identity = _bench_module("sass_identity")
    tree = tmp_path / "routed"
    experiment_tree.make_tree(tree, [])
    assert sass_identity.main([str(tree), "--keys", "fwd_h512"]) == 0
    line = capsys.readouterr().out.strip().splitlines()[0]
    same = int(line.split(": ")[1].split()[0])
    assert line.startswith("fwd_h512: ") and same > 0 and "0 differ, 0 gone, 0 new" in line
    assert sass_identity.main([str(tree), "--keys", "fwd_h512", "--rename", "forward=fwd"]) == 1
    assert f"0 same, 0 differ, {same} gone" in capsys.readouterr().out
