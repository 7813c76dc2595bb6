"""Releases and promotions become git tags that the real `gto show` understands (in a tmp git repo)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.core.errors import ReleaseError
from pipeline.release.build import BuildInputs, build_release
from pipeline.release.promote import promote, rollback
from pipeline.release.store.store import ReleaseStore
from tests.helpers.release_repo import dvc_lock, parity_report, tiny_repository

GTO = Path(sys.executable).with_name("gto")
ENV = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com"}


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, env=ENV, check=True, capture_output=True, text=True).stdout


def gto_show(repo: Path, *args: str) -> str:
    r = subprocess.run([str(GTO), "show", *args, "--plain"], cwd=repo, env=ENV, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return r.stdout


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A git repository with one commit, and a tagger identity for gto's annotated tags."""
    repo = tmp_path / "proj"
    repo.mkdir()
    git(repo, "init", "-q")
    for k, v in ENV.items():
        if k.startswith("GIT_"):
            monkeypatch.setenv(k, v)
    commit(repo, "1")
    return repo


def commit(repo: Path, content: str) -> str:
    (repo / "a.txt").write_text(content)
    git(repo, "add", "a.txt")
    git(repo, "commit", "-qm", content)
    return git(repo, "rev-parse", "HEAD").strip()


@pytest.mark.skipif(not GTO.exists(), reason="gto is installed with dvc")
def test_tags_are_listed_by_gto(tmp_path: Path, repo: Path) -> None:
    store = ReleaseStore(tmp_path / "store")
    p, lock = parity_report(tmp_path / "p.json"), dvc_lock(tmp_path / "dvc.lock")
    r1 = build_release(store, BuildInputs(tiny_repository(tmp_path / "r1"), p, None, lock, git_cwd=repo), unchecked_evidence=True)
    assert r1.tag.tag == "tiny@v1.0.0"
    # GTO allows one version per commit: a second tagged build on the same commit is refused
    # before anything is written (it used to be published untagged, and gto drifted from the store).
    with pytest.raises(ReleaseError, match=r"commit [0-9a-f]{7} already carries tiny@v1.0.0 \(GTO allows one version per commit\)") as e:
        build_release(store, BuildInputs(tiny_repository(tmp_path / "r1b", marker="b"), p, None, lock, git_cwd=repo), unchecked_evidence=True)
    assert "commit your change" in e.value.render() and "--no-tag" in e.value.render()
    assert store.versions("tiny") == [1]
    # --no-tag builds it; promoting it with tagging on is then refused before anything changes.
    r2 = build_release(store, BuildInputs(tiny_repository(tmp_path / "r1b", marker="b"), p, None, lock, git_cwd=repo), unchecked_evidence=True, tag=False)
    assert r2.version == 2
    with pytest.raises(ReleaseError, match="release 2 of 'tiny' has no GTO tag tiny@v2.0.0") as e:
        promote(store, "production", version=2, git_repo=str(repo))
    assert "gto register tiny" in e.value.render() and "--no-tag" in e.value.render()
    assert store.env_state("production", "tiny").live is None and not (tmp_path / "store/envs").exists()

    commit(repo, "2")
    r3 = build_release(store, BuildInputs(tiny_repository(tmp_path / "r3", marker="c"), p, None, lock, git_cwd=repo), unchecked_evidence=True)
    assert r3.version == 3 and r3.tag.tag == "tiny@v3.0.0"
    assert store.manifest("tiny", 3).commit == git(repo, "rev-parse", "HEAD").strip()

    assert promote(store, "production", version=1, git_repo=str(repo)).tag.tag == "tiny#production#1"
    up = promote(store, "production", version=3, git_repo=str(repo)).tag
    # The previous version leaves the stage (so `gto which` and `--sort semver` agree too), then v3 is assigned.
    assert up.tag == "tiny#production#3" and "v1.0.0 unassigned from production (tiny#production!#2)" in up.note
    show = gto_show(repo, "tiny")
    assert "v3.0.0" in show and "v1.0.0" in show
    assert _stage_version(gto_show(repo), "tiny") == "v3.0.0"
    down = rollback(store, "production", git_repo=str(repo)).tag
    assert down.tag == "tiny#production#5" and "tiny#production!#4" in down.note
    assert _stage_version(gto_show(repo), "tiny") == "v1.0.0"


@pytest.mark.skipif(not GTO.exists(), reason="gto is installed with dvc")
def test_gto_agrees_with_the_store_after_promotions_and_rollback(tmp_path: Path, repo: Path) -> None:
    """Finding 6: build v1 and v2 on two commits, promote each through every stage, roll production back."""
    store = ReleaseStore(tmp_path / "store")
    p, lock = parity_report(tmp_path / "p.json"), dvc_lock(tmp_path / "dvc.lock")
    build_release(store, BuildInputs(tiny_repository(tmp_path / "r1"), p, None, lock, git_cwd=repo), unchecked_evidence=True)
    commit(repo, "2")
    build_release(store, BuildInputs(tiny_repository(tmp_path / "r2", marker="two"), p, None, lock, git_cwd=repo), unchecked_evidence=True)
    for version in (1, 2):
        for env in store.environments:
            promote(store, env, version=version, git_repo=str(repo))  # no sleeps: tags of one stage never share a second
    rollback(store, "production", git_repo=str(repo))
    live = {env: f"v{store.env_state(env, 'tiny').live}.0.0" for env in store.environments}
    assert live == {"dev": "v2.0.0", "staging": "v2.0.0", "production": "v1.0.0"}
    assert gto_views(repo) == [live] * 4


def gto_views(repo: Path) -> list[dict[str, str | None]]:
    """Each stage's version in four views: `gto show` (by timestamp, the default), by semver, `gto which`, the CLI."""
    import gto.api
    from gto.constants import VersionSort

    envs = ("dev", "staging", "production")
    views = [{e: gto.api.show(str(repo), sort=sort)["tiny"]["stage"][e] for e in envs} for sort in (VersionSort.Timestamp, VersionSort.SemVer)]
    which = {}
    for e in envs:
        found = gto.api.find_versions_in_stage(str(repo), "tiny", e)
        which[e] = ", ".join(v.version for v in found) if found else None
    views.append(which)
    table = gto_show(repo)
    views.append({e: _stage_version(table, "tiny", f"#{e}") for e in envs})
    return views


def _stage_version(table: str, name: str, column: str = "#production") -> str:
    """The version in ``column`` of `gto show --plain` for ``name``."""
    lines = [ln.split() for ln in table.splitlines() if ln.strip()]
    header = lines[0]
    row = next(r for r in lines[1:] if r[0] == name)
    return row[header.index(column)]
