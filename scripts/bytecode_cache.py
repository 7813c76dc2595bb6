"""Keep a venv's compiled bytecode between setups, as hard links under ~/.cache/model-pipeline/bytecode/<key>/.

scripts/setup.sh compiles site-packages once because these machines set PYTHONDONTWRITEBYTECODE: without .pyc files
every process compiles every module it imports. That compile is most of a setup (about 20 s on 2 cores). uv installs
each source file as a hard link into its own cache, so a new venv of the same packages holds the same files (same
mtime, same size), and a .pyc compiled for one venv is valid in the next.

``save`` links the venv's .pyc files into the cache; ``restore`` links them back into a new venv. The key is the Python
version, every installed distribution and its version (editable installs left out: their files live in the clone) and
the caller's compile settings. A .pyc is restored only when its header matches the source beside it (magic number,
source mtime and size: the check Python makes on import), so a stale one is never used: that module is compiled again.

    python scripts/bytecode_cache.py restore SITE_PACKAGES SETTINGS   exit 0: restored; 1: no entry, compileall must run
    python scripts/bytecode_cache.py save SITE_PACKAGES SETTINGS

No library does this (pip and uv compile but keep no bytecode between environments), hence the script.
"""

from __future__ import annotations

import errno
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import py_compile
import shutil
import struct
import sys
from pathlib import Path

KEEP = 2  # cache entries kept (newest first): the current packages and the previous set
ONE_BY_ONE = 200  # more stale modules than this: compileall (on every core) does them instead of a serial loop here
COMPLETE = "COMPLETE"  # written last: an entry without it is a save that did not finish


def cache_root() -> Path:
    """Where entries live (``XDG_CACHE_HOME`` is honoured, as the other caches of this project do)."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "model-pipeline" / "bytecode"


def key(site: Path, settings: str) -> str:
    """A digest of the Python version, the non-editable distributions in ``site`` and ``settings``."""
    dists = []
    for d in importlib.metadata.distributions(path=[str(site)]):
        direct = d.read_text("direct_url.json")
        if direct and json.loads(direct).get("dir_info", {}).get("editable"):
            continue
        dists.append(f"{d.metadata['Name']}=={d.version}")
    text = "\n".join([sys.version, importlib.util.MAGIC_NUMBER.hex(), settings, *sorted(dists)])
    return hashlib.sha256(text.encode()).hexdigest()[:20]


def header_matches(pyc: Path, source: Path) -> bool:
    """True when ``pyc`` is a timestamp .pyc of this interpreter for ``source`` as it is now (PEP 552's fields)."""
    try:
        with open(pyc, "rb") as f:
            head = f.read(16)
        st = source.stat()
    except OSError:
        return False
    if len(head) < 16 or head[:4] != importlib.util.MAGIC_NUMBER:
        return False
    flags, mtime, size = struct.unpack("<III", head[4:16])
    return flags == 0 and mtime == int(st.st_mtime) & 0xFFFFFFFF and size == st.st_size & 0xFFFFFFFF


SUFFIX = f".{sys.implementation.cache_tag}.pyc"  # what compileall writes for this interpreter (no -O)


def source_of(pyc: Path) -> Path:
    """``pkg/__pycache__/mod.cpython-311.pyc`` -> ``pkg/mod.py`` (module names may hold dots: PyInstaller hooks do)."""
    return pyc.parent.parent / (pyc.name[: -len(SUFFIX)] + ".py")


def _link(src: Path, dst: Path) -> None:
    """Hard-link ``src`` to ``dst``; a copy where links cannot be made (another filesystem, as uv falls back too)."""
    try:
        os.link(src, dst)
    except OSError as e:
        if e.errno not in (errno.EXDEV, errno.EPERM, errno.EMLINK):
            raise
        shutil.copy2(src, dst)


def _pycs(root: Path) -> list[Path]:
    """Every .pyc of this interpreter under ``root``, relative to it."""
    found = []
    for dirpath, _dirs, files in os.walk(root):
        if os.path.basename(dirpath) == "__pycache__":
            found += [Path(dirpath, f).relative_to(root) for f in files if f.endswith(SUFFIX)]
    return found


def restore(site: Path, settings: str) -> int:
    """Link the cached .pyc files that match their sources into ``site`` and compile the rest of the entry's modules.

    0 when ``site`` is compiled as compileall would leave it, 1 when compileall must run (no entry, or more than
    :data:`ONE_BY_ONE` stale modules). The few sources that are not uv's hard links (packages built from an sdist, uv
    itself, the clone's editable finder) differ per venv: those are compiled here, one by one.
    """
    entry = cache_root() / key(site, settings)
    if not (entry / COMPLETE).exists():
        return 1
    linked, compiled = 0, []
    for rel in _pycs(entry):
        dst = site / rel
        src = source_of(dst)
        if dst.exists() and header_matches(dst, src):
            continue
        dst.unlink(missing_ok=True)  # an earlier setup's .pyc for an older source
        try:
            if not header_matches(entry / rel, src):
                raise OSError("stale")
            dst.parent.mkdir(exist_ok=True)
            _link(entry / rel, dst)
            linked += 1
        except OSError:  # stale, or the entry was pruned or replaced meanwhile by another setup
            compiled.append(src)
    compiled += [p for p in site.glob("__editable__*.py") if not header_matches(Path(importlib.util.cache_from_source(str(p))), p)]
    if len(compiled) > ONE_BY_ONE:  # e.g. uv's cache was rebuilt: its files have new mtimes
        print(f"bytecode: {linked} .pyc linked from {entry}, {len(compiled)} stale: compileall does them")
        return 1
    for src in compiled:
        py_compile.compile(str(src), doraise=False, quiet=2)
    os.utime(entry)  # used now: pruning keeps the newest entries
    print(f"bytecode: {linked} .pyc linked from {entry}, {len(compiled)} compiled")
    return 0


def save(site: Path, settings: str) -> int:
    """Link every valid .pyc of ``site`` into a new entry, swapped in whole; keep the newest :data:`KEEP` entries."""
    root = cache_root()
    entry = root / key(site, settings)
    tmp = root / f".{entry.name}.{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        for rel in _pycs(site):
            if rel.name.startswith("__editable__"):  # the clone's own path finder: differs per clone
                continue
            if header_matches(site / rel, source_of(site / rel)):
                (tmp / rel.parent).mkdir(parents=True, exist_ok=True)
                _link(site / rel, tmp / rel)
        tmp.mkdir(parents=True, exist_ok=True)
        (tmp / COMPLETE).write_text("")
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)  # never leave a half-written entry behind
        raise
    old = root / f".{entry.name}.old.{os.getpid()}"
    if entry.exists():
        entry.rename(old)
    try:
        tmp.rename(entry)
    except OSError:  # another setup saved the same entry meanwhile: keep theirs
        shutil.rmtree(tmp, ignore_errors=True)
    shutil.rmtree(old, ignore_errors=True)
    entries = sorted((p for p in root.iterdir() if not p.name.startswith(".")), key=lambda p: p.stat().st_mtime, reverse=True)
    for stale in entries[KEEP:]:
        shutil.rmtree(stale, ignore_errors=True)
    return 0


def main(argv: list[str]) -> int:
    if len(argv) != 3 or argv[0] not in ("restore", "save"):
        print("usage: python scripts/bytecode_cache.py restore|save SITE_PACKAGES SETTINGS", file=sys.stderr)
        return 2
    action, site, settings = argv[0], Path(argv[1]), argv[2]
    return restore(site, settings) if action == "restore" else save(site, settings)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
