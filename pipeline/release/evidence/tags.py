"""Record releases and promotions as git tags in GTO's format, so ``gto show`` agrees with the store.

- ``release build`` registers release N as ``<model>@vN.0.0`` on the commit recorded in
  the manifest (GTO versions must be SemVer; the model version is the major number).
- ``release promote --to E`` / ``rollback`` move stage E: ``<model>#E!#<n>`` unassigns it
  from the version that was live, ``<model>#E#<n>`` assigns it to the new one.

The store stays the source of truth; tags are an index for humans and CI, so with tagging
on every operation either tags or is refused *before* it changes the store:

- GTO allows one registered version per commit: a second build on the same commit (e.g. a
  ``dvc exp run`` without a commit) is refused, not silently left untagged;
- a version without a registration tag (built with ``--no-tag``) cannot be promoted.

How GTO decides the version of a stage: ``gto show`` (sort by timestamp) takes the version
whose latest *active* assignment is newest; ``gto which`` and ``gto show --sort semver`` take
the highest version with an active assignment. A stage assigned several times (a rollback
re-assigns with force) therefore reads differently in the two views unless the previous
version is unassigned, which is why every switch unassigns it. A VStage is active when its
newest event is an assignment, and tag times have 1 s resolution, so two events of one stage
must not share a second (an unassign and a re-assign in the same second sort arbitrarily):
:func:`switch` waits for the next second when the stage was tagged in the current one.

Outside a git repository nothing is tagged (there is no ``gto show`` to disagree). Tags are
created locally; push them with ``git push --tags`` (we never push on the user's behalf).
"""

from __future__ import annotations

import contextlib
import io
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.core.errors import ReleaseError

_INVALID = re.compile(r"[^a-zA-Z0-9\-_/]")


@dataclass
class TagResult:
    """What happened to the git tag(s) of one release operation."""

    tag: str | None
    note: str

    def __str__(self) -> str:
        return self.tag or f"not tagged ({self.note})"


def gto_name(model: str) -> str:
    """A GTO artifact name for ``model`` (GTO allows letters, digits, - _ /)."""
    return _INVALID.sub("-", model).strip("-_/") or "model"


def gto_version(version: int) -> str:
    return f"v{version}.0.0"


@contextlib.contextmanager
def _registry(repo: str | Path) -> Iterator[Any]:
    """GTO's view of ``repo`` (read fresh each time: tags change under us)."""
    from gto.registry import GitRegistry

    with GitRegistry.from_url(str(repo)) as reg:
        yield reg


def _need_identity(reg: Any, repo: str | Path) -> None:
    """GTO writes annotated tags, which need a tagger: refuse early instead of failing after the store changed."""
    from scmrepo.exceptions import SCMError

    try:
        reg.scm.pygit2.committer  # noqa: B018 - reading it is the check
    except (SCMError, KeyError, ValueError) as e:
        raise ReleaseError(
            f"git in {repo} has no user identity, so the GTO tag cannot be written",
            fix="set one (`git config user.name ...` and `git config user.email ...`), or pass --no-tag",
            details={"error": e},
        ) from None


def check_register(repo: str | Path | None, model: str, version: int, commit: str | None) -> None:
    """Refuse, before anything is written, a build whose registration tag GTO would reject.

    Raises:
        ReleaseError: the commit already carries a version of this model (GTO allows one
        per commit), the tag ``<model>@vN.0.0`` exists already, or git has no identity.
    """
    if repo is None or commit is None:
        return
    from gto.exceptions import GTOException

    name, ver = gto_name(model), gto_version(version)
    with _registry(repo) as reg:
        _need_identity(reg, repo)
        try:
            art = reg.find_artifact(name, create_new=True)
            at_commit = art.find_version(commit_hexsha=commit, allow_multiple=True) or []
            same_name = art.find_version(name=ver)
        except GTOException as e:
            raise ReleaseError(f"GTO cannot read the tags of '{name}' in {repo}", fix="check `gto show`; or pass --no-tag", details={"error": e}) from None
    taken = [v.version for v in at_commit if v.is_registered and v.is_active]
    if taken:
        raise ReleaseError(
            f"commit {commit[:7]} already carries {name}@{taken[0]} (GTO allows one version per commit), so release {version} could not be tagged {name}@{ver}",
            fix="commit your change first (each release gets its own commit), or pass --no-tag (the release then cannot be promoted with tagging on)",
            details={"commit": commit},
        )
    if same_name is not None:
        raise ReleaseError(
            f"the git tag {name}@{ver} already exists (on commit {same_name.commit_hexsha[:7]}), but the store's next release of '{model}' is {version}",
            fix="this git repository was tagged by another release store: build into that store (--store), or pass --no-tag",
        )


def register(repo: str | Path | None, model: str, version: int, commit: str | None, message: str) -> TagResult:
    """Tag release ``version`` as ``<model>@vN.0.0`` on ``commit`` (checked by :func:`check_register`).

    Raises:
        ReleaseError: GTO refused after all (another build tagged the commit meanwhile); the
        message gives the command that tags it by hand.
    """
    if repo is None or commit is None:
        return TagResult(None, "no git repository")
    import gto.api
    from gto.exceptions import GTOException

    name, ver = gto_name(model), gto_version(version)
    try:
        with contextlib.redirect_stdout(io.StringIO()):  # gto prints its own confirmation; we report ours
            gto.api.register(str(repo), name, commit, version=ver, message=message)
    except GTOException as e:
        raise ReleaseError(
            f"release {version} of '{model}' was published, but git refused its tag {name}@{ver}",
            fix=f"tag it by hand: `gto register {name} {commit} --version {ver}` (another build may have tagged this commit meanwhile)",
            details={"error": e},
        ) from None
    return TagResult(f"{name}@{ver}", "registered")


def check_assignable(repo: str | Path | None, model: str, version: int, commit: str | None) -> None:
    """Refuse, before anything changes, to promote a version GTO does not know.

    Raises:
        ReleaseError: release ``version`` has no registration tag (built with --no-tag or
        in another repository), or git has no identity.
    """
    if repo is None:
        return
    name, ver = gto_name(model), gto_version(version)
    with _registry(repo) as reg:
        _need_identity(reg, repo)
        found = reg.find_artifact(name, create_new=True).find_version(name=ver)
    if found is None or not (found.is_registered and found.is_active):
        by_hand = f"`gto register {name} {commit} --version {ver}`" if commit else f"`gto register {name} <commit> --version {ver}`"
        raise ReleaseError(
            f"release {version} of '{model}' has no GTO tag {name}@{ver} in {repo}, so the promotion could not be recorded in git",
            fix=f"register it first with {by_hand} (GTO allows one version per commit), or pass --no-tag (then `gto show` does not show this promotion)",
        )


def _stage_tag_times(reg: Any, name: str, env: str) -> list[int]:
    """Tag times (s) of every assignment and unassignment of stage ``env`` of ``name``."""
    prefix = f"{name}#{env}"
    out = []
    for t in reg.scm.list_tags():
        if t.startswith(prefix) and t[len(prefix) : len(prefix) + 1] in ("#", "!"):
            tag = reg.scm.get_tag(t)
            if tag is not None and hasattr(tag, "tag_time"):
                out.append(int(tag.tag_time))
    return out


def _wait_for_next_second(latest: int | None) -> None:
    """Sleep until the clock is past ``latest`` (whole seconds, as git records tag times)."""
    while latest is not None and int(time.time()) <= latest:
        time.sleep(latest + 1 - time.time() + 0.01)


def switch(repo: str | Path | None, model: str, env: str, version: int, message: str) -> TagResult:
    """Make ``version`` the only version GTO shows in stage ``env``: unassign the others, assign it.

    Raises:
        ReleaseError: GTO refused (the store has already switched; the message gives the
        commands that bring the tags in line).
    """
    if repo is None:
        return TagResult(None, "no git repository")
    import gto.api
    from gto.exceptions import GTOException

    name, ver = gto_name(model), gto_version(version)
    with _registry(repo) as reg:
        art = reg.find_artifact(name, create_new=True)
        others = sorted({v.version for v in art.get_versions(include_non_explicit=True) if v.version != ver and any(s.stage == env for s in v.get_vstages(active_only=True))})
        _wait_for_next_second(max(_stage_tag_times(reg, name, env), default=None))
    before = set(_list_tags(repo))
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            for old in others:
                gto.api.unassign(str(repo), name, stage=env, version=old, message=f"{message}: {old} leaves {env}")
            # force: a rollback assigns the stage again to a version that had it before.
            gto.api.assign(str(repo), name, env, version=ver, message=message, force=True)
    except GTOException as e:
        undo = "; ".join(f"gto unassign {name} {env} --version {o}" for o in others)
        raise ReleaseError(
            f"'{env}' now serves version {version} of '{model}', but git refused the GTO tag that records it",
            fix=f"record it by hand: {undo + '; ' if undo else ''}gto assign {name} {env} --version {ver} --force",
            details={"error": e},
        ) from None
    new = sorted(set(_list_tags(repo)) - before)
    assigned = [t for t in new if "!" not in t]
    unassigned = [t for t in new if "!" in t]
    note = "assigned" + (f"; {', '.join(others)} unassigned from {env} ({', '.join(unassigned)})" if others else "")
    return TagResult(assigned[0] if assigned else None, note)


def _list_tags(repo: str | Path) -> list[str]:
    from scmrepo.git import Git

    with Git(str(repo)) as scm:
        return list(scm.list_tags())
