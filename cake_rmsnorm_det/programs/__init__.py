"""Programs: build.json, content hashes, JIT build, disk cache, file lock, load through TVM-FFI.

A program is a kernel/binding ``.cu`` pair named ``cake_rmsnorm_det_`` + the first 20 hex digits
of the SHA-256 over its kernel file, its binding file and every project header they include.

Command line (run from a checkout; ``__main__.py`` beside this file, so that running it does not
load this module twice)::

    python -m cake_rmsnorm_det.programs verify       # names, hashes and build.json agree
    python -m cake_rmsnorm_det.programs rehash       # rename programs whose content changed
    python -m cake_rmsnorm_det.programs register --key bwd_h4096 --pass bwd --hidden 4096 K.cu B.cu
    python -m cake_rmsnorm_det.programs list
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import warnings
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

PREFIX = "cake_rmsnorm_det_"
HASH_DIGITS = 20
SUPPORTED_ARCHS: dict[str, tuple[int, int]] = {"sm_90a": (9, 0), "sm_100a": (10, 0), "sm_103a": (10, 3)}
# IEEE-exact division and square root, denormals kept: the math the contracts are written for.
NVCC_FLAGS: tuple[str, ...] = ("--prec-div=true", "--prec-sqrt=true", "--ftz=false", "-lineinfo")
_INCLUDE_RE = re.compile(r'^\s*#\s*include\s+"(cake/[^"]+)"', re.M)


# Both folders are fixed for the life of the process, and every call's route looks a program up
# through them: resolving the path each time was most of the route's 70-90 us of host time a call.
@lru_cache(maxsize=None)
def package_dir() -> Path:
    """The installed package's folder (cake_rmsnorm_det/, above this subpackage)."""
    return Path(__file__).resolve().parent.parent


@lru_cache(maxsize=None)
def source_root() -> Path:
    """The folder holding build.json and csrc/: the checkout, or the copy bundled into a wheel."""
    bundled = package_dir() / "_data"
    if (bundled / "build.json").exists():
        return bundled
    return package_dir().parent


def build_json_path() -> Path:
    """build.json: every program's sources, hashes, archs and flags."""
    return source_root() / "build.json"


def include_dir() -> Path:
    """The device headers (csrc/include) every program includes."""
    return source_root() / "csrc" / "include"


@dataclass(frozen=True)
class Program:
    """One routed program as recorded in build.json."""

    name: str
    key: str                      # role, e.g. "bwd_h4096" or "fwd_generic"
    pass_: str                    # "fwd" or "bwd"
    hidden: int | None            # the width it is specialised for; None = any width
    kernel: str                   # path relative to the source root
    binding: str
    kernel_sha256: str
    binding_sha256: str
    headers: dict[str, str] = field(default_factory=dict)
    archs: tuple[str, ...] = tuple(SUPPORTED_ARCHS)
    nvcc_flags: tuple[str, ...] = NVCC_FLAGS
    entry: str = ""               # the exported function: "forward" or "backward"
    launches: tuple[str, ...] = ()

    def record(self) -> dict[str, Any]:
        """The program as build.json writes it."""
        return {
            "name": self.name, "key": self.key, "pass": self.pass_, "hidden": self.hidden,
            "kernel": self.kernel, "kernel_sha256": self.kernel_sha256,
            "binding": self.binding, "binding_sha256": self.binding_sha256,
            "headers": dict(sorted(self.headers.items())), "archs": list(self.archs),
            "nvcc_flags": list(self.nvcc_flags), "entry": self.entry, "launches": list(self.launches),
        }

    @staticmethod
    def from_record(r: dict[str, Any]) -> "Program":
        """The program of one build.json record."""
        return Program(
            name=r["name"], key=r["key"], pass_=r["pass"], hidden=r["hidden"], kernel=r["kernel"],
            binding=r["binding"], kernel_sha256=r["kernel_sha256"], binding_sha256=r["binding_sha256"],
            headers=dict(r.get("headers", {})), archs=tuple(r["archs"]),
            nvcc_flags=tuple(r["nvcc_flags"]), entry=r["entry"], launches=tuple(r.get("launches", ())),
        )


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def included_headers(*sources: Path) -> list[Path]:
    """Every project header the sources include, transitively, sorted by path."""
    seen: dict[str, Path] = {}
    todo = list(sources)
    while todo:
        text = todo.pop().read_text()
        for rel in _INCLUDE_RE.findall(text):
            p = include_dir() / rel
            if rel not in seen:
                if not p.exists():
                    raise FileNotFoundError(f"header {rel} (included by a program) is missing under {include_dir()}")
                seen[rel] = p
                todo.append(p)
    return [seen[k] for k in sorted(seen)]


def content_name(kernel: Path, binding: Path) -> tuple[str, dict[str, str]]:
    """The program name of a kernel/binding pair, and the hashes of the headers it covers."""
    h = hashlib.sha256()
    headers: dict[str, str] = {}
    for label, p in (("kernel", kernel), ("binding", binding)):
        h.update(label.encode() + b"\0" + p.read_bytes() + b"\0")
    for p in included_headers(kernel, binding):
        rel = p.relative_to(source_root()).as_posix()
        h.update(rel.encode() + b"\0" + p.read_bytes() + b"\0")
        headers[rel] = _sha256(p)
    return PREFIX + h.hexdigest()[:HASH_DIGITS], headers


@lru_cache(maxsize=None)
def _load_build_json(root: Path) -> tuple[tuple[Program, ...], dict[str, Program]]:
    """build.json of source root `root` parsed once (_write_build_json forgets it): the programs in
    order, and indexed by key (the route of every call looks a program up, with no file access)."""
    data = json.loads((root / "build.json").read_text())
    progs = tuple(Program.from_record(r) for r in data["programs"])
    return progs, {p.key: p for p in progs}


def _build_json() -> tuple[tuple[Program, ...], dict[str, Program]]:
    return _load_build_json(source_root())


def programs() -> tuple[Program, ...]:
    """All programs of build.json."""
    return _build_json()[0]


def program_by_key(key: str) -> Program:
    """The program of a route's key (e.g. "bwd_h4096"), or a KeyError naming build.json."""
    prog = _build_json()[1].get(key)
    if prog is None:
        raise KeyError(f"no program with key {key!r} in {build_json_path()}")
    return prog


def _write_build_json(progs: list[Program]) -> None:
    progs = sorted(progs, key=lambda p: p.key)
    text = json.dumps({"schema": 1, "programs": [p.record() for p in progs]}, indent=2) + "\n"
    tmp = build_json_path().with_suffix(".json.tmp")
    tmp.write_text(text)
    os.replace(tmp, build_json_path())
    _load_build_json.cache_clear()


def _file_names(name: str) -> tuple[str, str]:
    return f"csrc/{name}_kernel.cu", f"csrc/{name}_binding.cu"


def register(key: str, pass_: str, hidden: int | None, kernel: Path, binding: Path,
             archs: tuple[str, ...] = tuple(SUPPORTED_ARCHS)) -> Program:
    """Name a new program from its content, move its files to their names, record it."""
    if pass_ not in ("fwd", "bwd"):
        raise ValueError("pass must be 'fwd' or 'bwd'")
    name, headers = content_name(kernel, binding)
    kdst, bdst = _file_names(name)
    root = source_root()
    if kernel.resolve() != (root / kdst).resolve():
        shutil.move(str(kernel), root / kdst)
    if binding.resolve() != (root / bdst).resolve():
        shutil.move(str(binding), root / bdst)
    prog = Program(
        name=name, key=key, pass_=pass_, hidden=hidden, kernel=kdst, binding=bdst,
        kernel_sha256=_sha256(root / kdst), binding_sha256=_sha256(root / bdst), headers=headers,
        archs=tuple(archs), entry="forward" if pass_ == "fwd" else "backward",
        launches=(("forward_kernel",) if pass_ == "fwd"
                  else ("backward_direct_kernel", "backward_ring_kernel", "dw_reduce_kernel")),
    )
    rest = [p for p in (programs() if build_json_path().exists() else ()) if p.key != key]
    for p in rest:
        if p.name == name:
            raise ValueError(f"{key}: same content as program {p.key} ({name})")
    _write_build_json(rest + [prog])
    return prog


def problems() -> list[str]:
    """Every disagreement between build.json, the program files and their content."""
    out: list[str] = []
    root = source_root()
    seen: set[str] = set()
    for p in programs():
        k, b = root / p.kernel, root / p.binding
        if not k.exists() or not b.exists():
            out.append(f"{p.key}: source file missing ({p.kernel}, {p.binding})")
            continue
        name, headers = content_name(k, b)
        if name != p.name:
            out.append(f"{p.key}: recorded as {p.name} but its content names it {name} (run rehash)")
        if (p.kernel, p.binding) != _file_names(p.name):
            out.append(f"{p.key}: files {p.kernel}, {p.binding} do not carry the program name {p.name}")
        if _sha256(k) != p.kernel_sha256 or _sha256(b) != p.binding_sha256:
            out.append(f"{p.key}: recorded source sha256 differs from the file")
        if headers != p.headers:
            out.append(f"{p.key}: recorded header hashes differ from the headers")
        if p.name in seen:
            out.append(f"{p.key}: duplicate program name {p.name}")
        seen.add(p.name)
        bad = [a for a in p.archs if a not in SUPPORTED_ARCHS]
        if bad:
            out.append(f"{p.key}: unsupported archs {bad}")
    listed = {x for p in programs() for x in (p.kernel, p.binding)}
    for f in sorted((root / "csrc").glob(f"{PREFIX}*.cu")):
        if f.relative_to(root).as_posix() not in listed:
            out.append(f"{f.name}: program file not listed in build.json")
    return out


def rehash() -> list[tuple[str, str, str]]:
    """Re-name every program whose content changed; returns (key, old, new) for each."""
    root = source_root()
    changed = []
    updated = []
    for p in programs():
        name, headers = content_name(root / p.kernel, root / p.binding)
        kdst, bdst = _file_names(name)
        if name != p.name:
            shutil.move(str(root / p.kernel), root / kdst)
            shutil.move(str(root / p.binding), root / bdst)
            changed.append((p.key, p.name, name))
        updated.append(Program(
            name=name, key=p.key, pass_=p.pass_, hidden=p.hidden, kernel=kdst, binding=bdst,
            kernel_sha256=_sha256(root / kdst), binding_sha256=_sha256(root / bdst), headers=headers,
            archs=p.archs, nvcc_flags=p.nvcc_flags, entry=p.entry, launches=p.launches))
    _write_build_json(updated)
    return changed


# ----------------------------------------------------------------------------------------------
# Toolchain discovery

FALLBACK_NVCC: tuple[Path, ...] = (Path("/usr/local/cuda/bin/nvcc"),)


def find_nvcc() -> Path:
    """nvcc from CUDA_HOME, then PATH; a RuntimeError that says where it looked otherwise."""
    looked = []
    for var in ("CUDA_HOME", "CUDA_PATH"):
        home = os.environ.get(var)
        if home:
            cand = Path(home) / "bin" / "nvcc"
            looked.append(f"${var}/bin/nvcc = {cand}")
            if cand.exists():
                return cand
        else:
            looked.append(f"${var} (unset)")
    which = shutil.which("nvcc")
    looked.append("nvcc on PATH")
    if which:
        return Path(which)
    for cand in FALLBACK_NVCC:
        looked.append(str(cand))
        if cand.exists():
            return cand
    raise RuntimeError(
        "cake_rmsnorm_det needs nvcc to build its CUDA programs and found none. Looked at: "
        + "; ".join(looked)
        + ". Install the CUDA toolkit (12.8 or newer) and set CUDA_HOME to it, or install a wheel "
        "with prebuilt programs (python -m cake_rmsnorm_det.aot)."
    )


@lru_cache(maxsize=None)
def cuda_home() -> Path:
    """The CUDA toolkit root: $CUDA_HOME, else the folder above nvcc's bin (asking nvcc itself
    when the nvcc on PATH is a wrapper script)."""
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var) and (Path(os.environ[var]) / "bin" / "nvcc").exists():
            return Path(os.environ[var])
    nvcc = find_nvcc().resolve()
    home = nvcc.parent.parent
    if (home / "include" / "cuda_runtime.h").exists():
        return home
    out = subprocess.run([str(nvcc), "-v", "--dryrun", "-E", "-x", "cu", os.devnull],
                         capture_output=True, text=True).stderr
    m = re.search(r"TOP=(\S+)", out)
    if m and (Path(m.group(1)) / "include" / "cuda_runtime.h").exists():
        return Path(m.group(1)).resolve()
    raise RuntimeError(f"found nvcc at {nvcc} but no CUDA toolkit beside it; set CUDA_HOME to the toolkit root")


def cudart_dirs(home: Path | None = None) -> list[Path]:
    """Folders holding libcudart under a CUDA home: lib64, lib and targets/*/lib all occur."""
    home = home or cuda_home()
    cands = [home / "lib64", home / "lib", *sorted(home.glob("targets/*/lib"))]
    return [d for d in cands if any(d.glob("libcudart.so*"))]


@lru_cache(maxsize=None)
def nvcc_version() -> str:
    """nvcc's release line (part of each build's cache key)."""
    out = subprocess.run([str(find_nvcc()), "--version"], capture_output=True, text=True, check=True).stdout
    m = re.search(r"release [^\n]*", out)
    return m.group(0) if m else out.strip().splitlines()[-1]


def tvm_ffi_version() -> str:
    """apache-tvm-ffi's version (part of each build's cache key)."""
    import tvm_ffi

    return str(getattr(tvm_ffi, "__version__", "unknown"))


def arch_of_capability(cap: tuple[int, int]) -> str:
    """The build arch of a compute capability, or a RuntimeError naming the supported ones."""
    for arch, c in SUPPORTED_ARCHS.items():
        if c == tuple(cap):
            return arch
    raise RuntimeError(
        f"compute capability {cap[0]}.{cap[1]} is not supported by cake_rmsnorm_det; supported: "
        + ", ".join(f"{a} ({c[0]}.{c[1]})" for a, c in SUPPORTED_ARCHS.items())
    )


def current_arch(device: Any = None) -> str:
    """The arch to build for: $CAKE_RMSNORM_DET_ARCH, else from the device's capability."""
    env = os.environ.get("CAKE_RMSNORM_DET_ARCH")
    if env:
        if env not in SUPPORTED_ARCHS:
            raise RuntimeError(f"CAKE_RMSNORM_DET_ARCH={env!r} is not one of {sorted(SUPPORTED_ARCHS)}")
        return env
    import torch

    if not torch.cuda.is_available():
        raise RuntimeError("no CUDA device to take the arch from: pass arch= (one of "
                           f"{sorted(SUPPORTED_ARCHS)}) or set CAKE_RMSNORM_DET_ARCH")
    index = torch.device(device).index if device is not None else None
    return _arch_of_device(index if index is not None else torch.cuda.current_device())


@lru_cache(maxsize=None)
def _arch_of_device(index: int) -> str:
    # a device's capability is fixed: asked once, not on every call's route
    import torch

    return arch_of_capability(torch.cuda.get_device_capability(index))


@lru_cache(maxsize=None)
def _sm_count(index: int) -> int:
    import torch

    return torch.cuda.get_device_properties(index).multi_processor_count


def sm_count(device: Any = None) -> int:
    """SM count of a CUDA device (default: the current one), cached per device."""
    import torch

    index = torch.device(device).index if device is not None else None
    return _sm_count(index if index is not None else torch.cuda.current_device())


def _arch_list_value(arch: str) -> str:
    major, minor = SUPPORTED_ARCHS[arch]
    return f"{major}.{minor}a"  # tvm-ffi turns "9.0a" into -gencode=arch=compute_90a,code=sm_90a


# ----------------------------------------------------------------------------------------------
# Cache, build, load

def cache_root() -> Path:
    """$CAKE_RMSNORM_DET_CACHE or ~/.cache/cake_rmsnorm_det; a temp folder if that is read-only."""
    root = Path(os.environ.get("CAKE_RMSNORM_DET_CACHE", Path.home() / ".cache" / "cake_rmsnorm_det"))
    try:
        root.mkdir(parents=True, exist_ok=True)
        probe = root / f".write-probe-{os.getpid()}"
        probe.write_text("")
        probe.unlink()
        return root
    except OSError:
        fallback = Path(tempfile.gettempdir()) / f"cake_rmsnorm_det-{os.getuid()}"
        warnings.warn(
            f"cake_rmsnorm_det cache {root} is not writable; building into {fallback} instead "
            "(set CAKE_RMSNORM_DET_CACHE to a writable folder to keep builds)",
            RuntimeWarning, stacklevel=3)
        fallback.mkdir(parents=True, exist_ok=True)
        return fallback


def cache_key(prog: Program, arch: str) -> str:
    """Covers program hash, arch, nvcc version, flags and tvm-ffi version: no stale hit possible."""
    h = hashlib.sha256()
    for part in (prog.name, arch, nvcc_version(), " ".join(prog.nvcc_flags), tvm_ffi_version()):
        h.update(part.encode() + b"\0")
    return h.hexdigest()[:16]


def _library_ok(lib: Path) -> bool:
    """A library counts only if its sidecar hash matches: truncated or half-copied files do not."""
    side = lib.with_name(lib.name + ".sha256")
    try:
        return lib.exists() and side.read_text().strip() == _sha256(lib)
    except OSError:
        return False


_ENV_LOCK = threading.Lock()


def build_program(prog: Program, arch: str, out_dir: Path | None = None, verbose: bool = False) -> Path:
    """Build `prog` for `arch` into out_dir (default: the cache) and return the library path.

    One file lock per program folder; the library is linked under a temporary folder and renamed
    into place with its hash beside it, so a reader never loads a half-written file."""
    from filelock import FileLock

    if arch not in SUPPORTED_ARCHS:
        raise RuntimeError(f"arch {arch!r} is not supported; supported: {sorted(SUPPORTED_ARCHS)}")
    if arch not in prog.archs:
        raise RuntimeError(f"program {prog.key} ({prog.name}) is not built for {arch}; it lists {prog.archs}")
    out_dir = Path(out_dir) if out_dir is not None else cache_root() / arch / cache_key(prog, arch)
    out_dir.mkdir(parents=True, exist_ok=True)
    lib = out_dir / f"{prog.name}.so"
    if _library_ok(lib):
        return lib
    with FileLock(str(out_dir / f"{prog.name}.lock")):
        if _library_ok(lib):
            return lib
        tmp = Path(tempfile.mkdtemp(prefix=f"build-{os.getpid()}-", dir=out_dir))
        try:
            root = source_root()
            home = cuda_home()
            ld = []
            for d in cudart_dirs(home):
                ld += [f"-L{d}", f"-Wl,-rpath,{d}"]
            import tvm_ffi.cpp

            with _ENV_LOCK:
                saved = {k: os.environ.get(k) for k in ("TVM_FFI_CUDA_ARCH_LIST", "CUDA_HOME")}
                os.environ["TVM_FFI_CUDA_ARCH_LIST"] = _arch_list_value(arch)
                os.environ["CUDA_HOME"] = str(home)
                try:
                    built = tvm_ffi.cpp.build(
                        prog.name,
                        cuda_files=[str(root / prog.kernel), str(root / prog.binding)],
                        extra_cuda_cflags=list(prog.nvcc_flags),
                        extra_ldflags=ld,
                        extra_include_paths=[str(include_dir())],
                        build_directory=str(tmp),
                        backend="cuda",
                    )
                except Exception as e:  # the compiler's message, with the program named
                    raise RuntimeError(f"building {prog.key} ({prog.name}) for {arch} failed:\n{e}") from None
                finally:
                    for k, v in saved.items():
                        if v is None:
                            os.environ.pop(k, None)
                        else:
                            os.environ[k] = v
            staged = out_dir / f".{prog.name}.so.{os.getpid()}"
            shutil.copyfile(built, staged)
            lib.with_name(lib.name + ".sha256").write_text(_sha256(staged) + "\n")
            os.replace(staged, lib)
            with open(out_dir / "build.log", "a") as log:  # one line per real compile
                log.write(f"{prog.name} {arch} nvcc '{nvcc_version()}' tvm-ffi {tvm_ffi_version()} "
                          f"pid {os.getpid()}\n")
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    if verbose:
        print(f"built {prog.key} ({prog.name}) for {arch} -> {lib}", file=sys.stderr)
    return lib


def aot_dirs() -> list[Path]:
    """Prebuilt libraries looked at before the cache: the package's bundled AOT folder, then
    $CAKE_RMSNORM_DET_AOT_DIR."""
    dirs = [package_dir() / "_aot"]
    env = os.environ.get("CAKE_RMSNORM_DET_AOT_DIR")
    if env:
        dirs.append(Path(env))
    return dirs


def find_built(prog: Program, arch: str) -> Path | None:
    """The library of `prog` for `arch` if one is built (AOT folders, then the cache)."""
    for d in aot_dirs():
        lib = d / arch / f"{prog.name}.so"
        if _library_ok(lib):
            return lib
    try:
        lib = cache_root() / arch / cache_key(prog, arch) / f"{prog.name}.so"
    except RuntimeError:  # no nvcc: only AOT builds can exist
        return None
    return lib if _library_ok(lib) else None


_LOADED: dict[tuple[str, str], Any] = {}
_LOAD_LOCK = threading.Lock()


def load_program(prog: Program, arch: str) -> Any:
    """The loaded TVM-FFI module of `prog` for `arch`, building it on first use (memoized)."""
    key = (prog.name, arch)
    mod = _LOADED.get(key)
    if mod is not None:
        return mod
    with _LOAD_LOCK:
        mod = _LOADED.get(key)
        if mod is None:
            import tvm_ffi

            lib = find_built(prog, arch) or build_program(prog, arch)
            mod = tvm_ffi.load_module(str(lib))
            _LOADED[key] = mod
    return mod
