"""Record releases and promotions as git tags in GTO's format, so ``gto show`` lists them.

- ``release build`` registers release N as ``<model>@vN.0.0`` on the commit recorded in
  the manifest (GTO versions must be SemVer; the model version is the major number).
- ``release promote --to E`` / ``rollback`` assign stage E: ``<model>#E#<counter>``.

The store stays the source of truth; tags are an index for humans and CI. GTO allows one
registered version per commit, so a second release built from the same commit (e.g. a
``dvc exp run`` without a commit) is not tagged and the reason is reported; the same
goes for running outside a git repository. Tags are created locally; push them with
``git push --tags`` (we never push on the user's behalf).
"""

from __future__ import annotations

import contextlib
import io
import re
from dataclasses import dataclass
from pathlib import Path

_INVALID = re.compile(r"[^a-zA-Z0-9\-_/]")


@dataclass
class TagResult:
    """What happened to the git tag of one release operation."""

    tag: str | None
    note: str

    def __str__(self) -> str:
        return self.tag or f"not tagged ({self.note})"


def gto_name(model: str) -> str:
    """A GTO artifact name for ``model`` (GTO allows letters, digits, - _ /)."""
    return _INVALID.sub("-", model).strip("-_/") or "model"


def gto_version(version: int) -> str:
    return f"v{version}.0.0"


def _tags(repo: Path) -> set[str]:
    from scmrepo.git import Git

    with Git(str(repo)) as scm:
        return set(scm.list_tags())


def register(repo: str | Path | None, model: str, version: int, commit: str | None, message: str) -> TagResult:
    """Tag release ``version`` as ``<model>@vN.0.0`` on ``commit``; never raises for tag problems."""
    if repo is None or commit is None:
        return TagResult(None, "no git repository")
    import gto.api
    from gto.exceptions import GTOException

    name, ver = gto_name(model), gto_version(version)
    try:
        with contextlib.redirect_stdout(io.StringIO()):  # gto prints its own confirmation; we report ours
            gto.api.register(str(repo), name, commit, version=ver, message=message)
    except GTOException as e:  # e.g. VersionExistsForCommit: GTO allows one version per commit
        return TagResult(None, f"gto refused: {e}")
    return TagResult(f"{name}@{ver}", "registered")


def assign(repo: str | Path | None, model: str, version: int, env: str, message: str) -> TagResult:
    """Tag the assignment of stage ``env`` to release ``version``; never raises for tag problems."""
    if repo is None:
        return TagResult(None, "no git repository")
    import gto.api
    from gto.exceptions import GTOException

    name, ver = gto_name(model), gto_version(version)
    if f"{name}@{ver}" not in _tags(Path(repo)):
        return TagResult(None, f"version {ver} is not registered in git (see `release list`)")
    before = _tags(Path(repo))
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            # force: a rollback assigns the stage again to a version that already had it.
            gto.api.assign(str(repo), name, env, version=ver, message=message, force=True)
    except GTOException as e:
        return TagResult(None, f"gto refused: {e}")
    new = sorted(_tags(Path(repo)) - before)
    return TagResult(new[0] if new else None, "assigned")
