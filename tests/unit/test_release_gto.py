"""Releases and promotions become git tags that the real `gto show` understands (in a tmp git repo)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pipeline.release.build import build_release
from pipeline.release.promote import promote, rollback
from pipeline.release.store import ReleaseStore
from tests.helpers.release_repo import dvc_lock, parity_report, tiny_repository

GTO = Path(sys.executable).with_name("gto")
ENV = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com"}


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, env=ENV, check=True, capture_output=True, text=True).stdout


def gto_show(repo: Path, *args: str) -> str:
    r = subprocess.run([str(GTO), "show", *args, "--plain"], cwd=repo, env=ENV, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return r.stdout


@pytest.mark.skipif(not GTO.exists(), reason="gto is installed with dvc")
def test_tags_are_listed_by_gto(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    repo = tmp_path / "proj"
    repo.mkdir()
    git(repo, "init", "-q")
    for k, v in ENV.items():
        if k.startswith("GIT_"):
            monkeypatch.setenv(k, v)  # gto creates annotated tags, which need a tagger identity
    (repo / "a.txt").write_text("1")
    git(repo, "add", "a.txt")
    git(repo, "commit", "-qm", "one")
    store = ReleaseStore(tmp_path / "store")
    p, lock = parity_report(tmp_path / "p.json"), dvc_lock(tmp_path / "dvc.lock")
    r1 = build_release(store, tiny_repository(tmp_path / "r1"), p, None, lock, git_cwd=repo)
    assert r1.tag.tag == "tiny@v1.0.0"
    # GTO allows one version per commit: a second build on the same commit is not tagged, and says why.
    r_same = build_release(store, tiny_repository(tmp_path / "r1b", marker="b"), p, None, lock, git_cwd=repo)
    assert r_same.tag.tag is None and "already registered" in r_same.tag.note
    (repo / "a.txt").write_text("2")
    git(repo, "commit", "-qam", "two")
    r3 = build_release(store, tiny_repository(tmp_path / "r3", marker="c"), p, None, lock, git_cwd=repo)
    assert r3.version == 3 and r3.tag.tag == "tiny@v3.0.0"
    assert store.manifest("tiny", 3)["git"]["commit"] == git(repo, "rev-parse", "HEAD").strip()

    assert promote(store, "production", version=1, git_repo=str(repo)).tag.tag == "tiny#production#1"
    time.sleep(1.1)  # git tag times have 1 s resolution and gto orders assignments by them
    assert promote(store, "production", version=3, git_repo=str(repo)).tag.tag == "tiny#production#2"
    show = gto_show(repo, "tiny")
    assert "v3.0.0" in show and "v1.0.0" in show
    assert _stage_version(gto_show(repo), "tiny") == "v3.0.0"
    time.sleep(1.1)
    assert rollback(store, "production", git_repo=str(repo)).tag.tag == "tiny#production#3"
    assert _stage_version(gto_show(repo), "tiny") == "v1.0.0"


def _stage_version(table: str, name: str) -> str:
    """The version in the #production column of `gto show --plain` for ``name``."""
    lines = [ln.split() for ln in table.splitlines() if ln.strip()]
    header = lines[0]
    row = next(r for r in lines[1:] if r[0] == name)
    return row[header.index("#production")]
