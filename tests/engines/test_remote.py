"""A DVC remote on a real S3 API (moto's server): what one clone pushes, another pulls and does not rebuild."""

from __future__ import annotations

import filecmp
import time
from collections.abc import Callable
from pathlib import Path

from tests.helpers.project import DVC, TWO, Built, Recipe, commit, ran, sh


def same_tree(a: Path, b: Path) -> list[str]:
    """Relative paths whose bytes differ (or exist on one side only) between two directory trees."""
    cmp = filecmp.dircmp(a, b)
    out = [str(Path(a.name) / n) for n in cmp.left_only + cmp.right_only]
    _, mismatch, errors = filecmp.cmpfiles(a, b, cmp.common_files, shallow=False)
    out += [str(Path(a.name) / n) for n in mismatch + errors]
    for d in cmp.common_dirs:
        out += same_tree(a / d, b / d)
    return out


def test_push_in_one_clone_pull_in_another_reruns_nothing(tmp_path: Path, s3, built: Callable[[Recipe], Built]) -> None:  # noqa: ANN001 - fixture
    bucket = s3.bucket("dvc-remote")
    a = built(TWO).path  # the model stages ran there
    # The README's remote setup, as written there (endpointurl only because the server is a local one).
    sh(a, *DVC, "remote", "add", "-d", "store", f"s3://{bucket}/cache")
    sh(a, *DVC, "remote", "modify", "store", "endpointurl", s3.endpoint)
    commit(a, "project")
    sh(a, *DVC, "repro", "repository", env=s3.env)
    t0 = time.monotonic()
    sh(a, *DVC, "push", env=s3.env)
    push_s = time.monotonic() - t0
    commit(a, "run")
    assert s3.keys(bucket, "cache/"), "dvc push stored nothing"

    b = tmp_path / "b"
    sh(tmp_path, "git", "clone", "-q", str(a), str(b))
    t0 = time.monotonic()
    sh(b, *DVC, "pull", "--with-deps", "repository", env=s3.env)  # the model stages A ran (A never ran the bench)
    pull_s = time.monotonic() - t0
    again = sh(b, *DVC, "repro", "repository", env=s3.env)
    assert ran(again.stdout) == ["probe"], again.stdout
    repo = "artifacts/model_repository"
    assert same_tree(a / repo, b / repo) == []
    assert (b / "artifacts" / "reports" / "parity.json").read_bytes() == (a / "artifacts" / "reports" / "parity.json").read_bytes()
    print(f"dvc push {push_s:.2f} s, dvc pull {pull_s:.2f} s (tiny model)")


def test_unreachable_remote_fails_with_one_message(s3, built: Callable[[Recipe], Built]) -> None:  # noqa: ANN001 - fixture
    a = built(TWO).path  # its cache holds what the model stages wrote: something to push
    sh(a, *DVC, "remote", "add", "-d", "store", "s3://no-such-bucket-here/cache")
    sh(a, *DVC, "remote", "modify", "store", "endpointurl", s3.endpoint)
    commit(a, "project")
    res = sh(a, *DVC, "push", check=False, env=s3.env)
    assert res.returncode != 0
    out = res.stdout + res.stderr
    assert "Traceback" not in out and "testing-secret" not in out, out
