"""The check that files still match a release manifest's sha256s: in the store, in an environment, in an archive."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from pipeline.core.errors import ReleaseError
from pipeline.records.release import FileTable

Hasher = Callable[[str], tuple[str, int]]  # relative path -> (sha256, size) of the file there


@dataclass(frozen=True)
class Mismatch:
    """One way the files on disk differ from the manifest."""

    kind: str  # changed | missing | unexpected | inconsistent
    path: str
    detail: str = ""

    def __str__(self) -> str:
        return f"{self.kind}: {self.path}" + (f" ({self.detail})" if self.detail else "")


def compare(expected: FileTable, actual_files: list[str], hasher: Hasher) -> list[Mismatch]:
    """Every difference between ``expected`` and the files present (hashing only listed files).

    ``hasher`` reads one file; it is injected so the same check runs on a release in the store, on a
    version copied into an environment and on an unpacked archive.
    """
    problems: list[Mismatch] = []
    # Python's bytecode cache, which the python backend's stub writes beside a model it serves (the text endpoint's
    # model.py), is derived from a listed file, never shipped: a served environment stays intact with it.
    present = {p for p in actual_files if "__pycache__" not in p.split("/")}
    for path in sorted(set(expected) - present):
        problems.append(Mismatch("missing", path))
    for path in sorted(present - set(expected)):
        problems.append(Mismatch("unexpected", path, "file not in the manifest"))
    for path in sorted(present & set(expected)):
        digest, size = hasher(path)
        want = expected[path]
        if digest != want.sha256:
            problems.append(Mismatch("changed", path, f"sha256 {digest[:12]}... != manifest {want.sha256[:12]}..., size {size} vs {want.size}"))
    return problems


def raise_on_mismatch(problems: list[Mismatch], what: str, where: str, fix: str) -> None:
    """Raise one :class:`ReleaseError` listing every mismatch (none: return)."""
    if problems:
        raise ReleaseError(
            f"{what}: {len(problems)} file(s) differ from the manifest",
            fix=fix,
            details={"location": where, "problems": "\n    " + "\n    ".join(map(str, problems))},
        )
