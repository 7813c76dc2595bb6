"""What ``release list`` shows of one model: a row per release, then warnings and how to serve each environment."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pipeline.core.errors import ReleaseError
from pipeline.release.store import canaries, pointer
from pipeline.release.store.publish import unfinished
from pipeline.release.store.store import ReleaseStore

if TYPE_CHECKING:
    from tritonclient.grpc import model_config_pb2 as mc

COLUMNS = ("version", "created UTC", "commit", "parity", "files", "MB", "live in", "installed in")


def describe(st: ReleaseStore, mdl: str) -> tuple[list[list[str]], list[str]]:
    """The table rows (one per release; a release whose manifest cannot be read is a row too) and the lines after it."""
    states = {e: st.env_state(e, mdl) for e in st.environments}
    rows: list[list[str]] = []
    lines: list[str] = []
    versions = st.versions(mdl)
    for v in versions:
        try:
            m = st.manifest(mdl, v)
        except ReleaseError as err:  # one bad manifest must not hide every other release
            lines.append(f"  WARNING {mdl} {v}: {err.what}; fix: `release verify` names what is wrong")
            rows.append([str(v), "?", "?", "unreadable", "?", "?", "-", "-"])
            continue
        size = sum(f.size for f in m.files.values()) / 1e6
        rows.append(
            [
                str(v),
                m.created_at[:16].replace("T", " "),
                (m.commit or "-")[:7],
                "pass" if m.parity is not None and m.parity.passed else "?",
                str(len(m.files)),
                f"{size:.1f}",
                ", ".join(env for env, s in states.items() if s.live == v) or "-",
                ", ".join(env for env, s in states.items() if v in s.present) or "-",
            ]
        )
    for env, s in states.items():
        if s.live is not None and s.live not in versions:
            lines.append(f"  WARNING {env}: its pointer names version {s.live}, which is not a release here; fix: release promote --to {env} --version <N>")
    if st.fs.s3 is not None:
        lines += [f"  note: {mdl} {u.version}: {u.describe(st.lock_lease_s)}" for u in unfinished(st, mdl)]
    for env in st.environments:
        served = _served(st, env, mdl)
        # A text endpoint calls its model: the server loads the set, the model first.
        calls = pointer.calls(served) if served is not None else None
        load = " ".join(f"--load-model={m}" for m in [*([calls] if calls else []), mdl])
        serve = f"  {env}: serve with tritonserver --model-repository={st.env_repository(env)} --model-control-mode=explicit {load}"
        if states[env].live is not None and served is not None and served.response_cache.enable:
            serve += " --cache-config=local,size=<bytes> (its config turns on the response cache, which caches nothing without one)"
        lines.append(serve)
        rec = canaries.read(st.fs, env, mdl)
        if rec is not None:
            lines.append(f"  {env}: {rec.summary_line()}")
    if st.fs.s3 is not None:
        lines.append("  (tritonserver reads S3 with AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and AWS_DEFAULT_REGION from its environment)")
    return rows, lines


def _served(st: ReleaseStore, env: str, mdl: str) -> mc.ModelConfig | None:
    """The config ``env`` serves ``mdl`` with (None when there is none or it cannot be read: ``release verify`` reports
    that)."""
    try:
        return st.served_config(env, mdl)
    except (ReleaseError, OSError):
        return None
