"""scripts/bytecode_cache.py, setup's bytecode between venvs: a .pyc comes back only for the very source it was made from."""

from __future__ import annotations

import compileall
import errno
import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType

import pytest

from tests.helpers.project import script

SOURCES = {
    "bcpkg/__init__.py": "VALUE = 1\n",
    "bcpkg/mod.py": "def f():\n    return 'mod'\n",
    "hook-bcpkg.sub.py": "NAME = 'a module name with dots, as PyInstaller hooks have'\n",
    "built.py": "WHO = 'a package built from an sdist: its file differs per venv'\n",
}


@pytest.fixture
def bc(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return script("bytecode_cache")


def _dist(site: Path, name: str, version: str) -> None:
    info = site / f"{name}-{version}.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")


def _first_venv(root: Path) -> Path:
    """A compiled site-packages, with an editable install's path finder as uv writes one."""
    site = root / "site-packages"
    for rel, text in SOURCES.items():
        (site / rel).parent.mkdir(parents=True, exist_ok=True)
        (site / rel).write_text(text)
    (site / "__editable___proj_finder.py").write_text(f"PATH = {str(root)!r}\n")
    _dist(site, "bcpkg", "1.0")
    assert compileall.compile_dir(site, quiet=2)
    return site


def _next_venv(first: Path, root: Path) -> Path:
    """The same packages in a new venv: uv's hard links to the same files, except the one built from an sdist."""
    site = root / "site-packages"
    for rel in SOURCES:
        (site / rel).parent.mkdir(parents=True, exist_ok=True)
        if rel == "built.py":
            (site / rel).write_text(SOURCES[rel])
            os.utime(site / rel, (1_000_000_000, 1_000_000_000))  # a different mtime than the first venv's copy
        else:
            os.link(first / rel, site / rel)
    (site / "__editable___proj_finder.py").write_text(f"PATH = {str(root)!r}\n")
    _dist(site, "bcpkg", "1.0")
    return site


def _pyc(site: Path, rel: str) -> Path:
    """Where Python itself looks for ``rel``'s bytecode (importlib's rule, not the script's)."""
    return Path(importlib.util.cache_from_source(str(site / rel)))


def test_a_new_venv_gets_the_cached_bytecode_and_compiles_only_what_differs(bc: ModuleType, tmp_path: Path) -> None:
    first = _first_venv(tmp_path / "a")
    assert bc.restore(first, "settings") == 1  # nothing cached yet: compileall must run
    assert bc.save(first, "settings") == 0
    entry = bc.cache_root() / bc.key(first, "settings")
    assert (entry / bc.COMPLETE).exists()
    assert not list(entry.glob("__pycache__/__editable__*")), "the clone's own finder is not kept"

    nxt = _next_venv(first, tmp_path / "b")
    assert bc.restore(nxt, "settings") == 0
    for rel in SOURCES:
        pyc = _pyc(nxt, rel)
        assert bc.header_matches(pyc, nxt / rel), rel  # every module has a .pyc Python accepts for its source
        same_inode = pyc.stat().st_ino == _pyc(first, rel).stat().st_ino
        assert same_inode == (rel != "built.py"), rel  # linked, except the differing one, compiled for its own file
    assert bc.header_matches(_pyc(nxt, "__editable___proj_finder.py"), nxt / "__editable___proj_finder.py")
    # Python itself accepts the restored .pyc: with the source's text changed but its size and mtime kept, the
    # import runs the cached code.
    src = nxt / "bcpkg" / "mod.py"
    st = src.stat()
    src.write_text(SOURCES["bcpkg/mod.py"].replace("'mod'", "'new'"))
    os.utime(src, ns=(st.st_atime_ns, st.st_mtime_ns))
    sys.path.insert(0, str(nxt))
    try:
        import bcpkg.mod  # type: ignore[import-not-found]

        assert bcpkg.mod.f() == "mod"
    finally:
        sys.path.remove(str(nxt))
        for name in ("bcpkg", "bcpkg.mod"):
            sys.modules.pop(name, None)


def test_a_stale_pyc_is_never_restored(bc: ModuleType, tmp_path: Path) -> None:
    first = _first_venv(tmp_path / "a")
    bc.save(first, "settings")
    nxt = _next_venv(first, tmp_path / "b")
    os.utime(first / "bcpkg" / "mod.py", (1_200_000_000, 1_200_000_000))  # the shared source changed after the save
    assert not bc.header_matches(_pyc(first, "bcpkg/mod.py"), nxt / "bcpkg" / "mod.py")
    assert bc.restore(nxt, "settings") == 0
    assert bc.header_matches(_pyc(nxt, "bcpkg/mod.py"), nxt / "bcpkg" / "mod.py")


def test_across_filesystems_the_bytecode_is_copied(bc: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Where a hard link cannot be made (the cache on another filesystem: EXDEV), save and restore copy instead."""
    first = _first_venv(tmp_path / "a")
    nxt = _next_venv(first, tmp_path / "b")  # its hard links made before links start failing

    def no_links(src: str, dst: str) -> None:
        raise OSError(errno.EXDEV, "Invalid cross-device link")

    monkeypatch.setattr(bc.os, "link", no_links)
    assert bc.save(first, "settings") == 0
    assert bc.restore(nxt, "settings") == 0
    for rel in SOURCES:
        pyc = _pyc(nxt, rel)
        assert bc.header_matches(pyc, nxt / rel) and pyc.stat().st_ino != _pyc(first, rel).stat().st_ino, rel


def test_many_stale_modules_are_left_to_compileall(bc: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """More stale modules than a serial loop should compile (uv's cache rebuilt, say): restore says compileall must run."""
    first = _first_venv(tmp_path / "a")
    bc.save(first, "settings")
    nxt = _next_venv(first, tmp_path / "b")  # built.py differs: one stale module
    monkeypatch.setattr(bc, "ONE_BY_ONE", 0)
    assert bc.restore(nxt, "settings") == 1
    assert not _pyc(nxt, "built.py").exists()  # not compiled here, one by one


def test_other_packages_or_settings_get_no_entry_and_old_entries_are_pruned(bc: ModuleType, tmp_path: Path) -> None:
    first = _first_venv(tmp_path / "a")
    bc.save(first, "settings")
    assert bc.restore(first, "other settings") == 1
    nxt = _next_venv(first, tmp_path / "b")
    _dist(nxt, "extra", "2.0")
    assert bc.restore(nxt, "settings") == 1  # another package set
    names = ["settings", *(f"settings {n}" for n in range(bc.KEEP + 2))]
    for n, settings in enumerate(names):
        bc.save(first, settings)
        when = 1_500_000_000 + n  # each save older than the next: pruning goes by last use
        os.utime(bc.cache_root() / bc.key(first, settings), (when, when))
    assert sorted(p.name for p in bc.cache_root().iterdir()) == sorted(bc.key(first, s) for s in names[-bc.KEEP :])


def test_a_save_that_fails_halfway_leaves_no_entry(bc: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = _first_venv(tmp_path / "a")
    calls = []

    def link_then_fail(src: str, dst: str) -> None:
        calls.append(dst)
        if len(calls) == 2:
            raise OSError(28, "No space left on device")
        os.link(src, dst)

    monkeypatch.setattr(bc.os, "link", link_then_fail)
    with pytest.raises(OSError, match="No space"):
        bc.save(first, "settings")
    assert list(bc.cache_root().iterdir()) == []  # neither an entry nor its temp dir
    assert bc.restore(first, "settings") == 1


def test_usage(bc: ModuleType, capsys: pytest.CaptureFixture[str]) -> None:
    assert bc.main(["fetch", "x", "y"]) == 2
    assert "restore|save SITE_PACKAGES SETTINGS" in capsys.readouterr().err
