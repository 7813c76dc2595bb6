"""What ``release list`` shows of one model: a row per release, then warnings and how to serve each environment."""

from __future__ import annotations

from pipeline.core.errors import ReleaseError
from pipeline.release.canary_report import read_record, summary_line
from pipeline.release.publish import unfinished
from pipeline.release.store import ReleaseStore

COLUMNS = ("version", "created UTC", "commit", "parity", "files", "MB", "live in", "installed in")


def describe(st: ReleaseStore, mdl: str) -> tuple[list[list[str]], list[str]]:
    """The table rows (one per release; a release whose manifest cannot be read is a row too) and the lines after it."""
    states = {e: st.env_state(e, mdl) for e in st.environments}
    rows, lines = [], []
    versions = st.versions(mdl)
    for v in versions:
        try:
            m = st.manifest(mdl, v)
        except ReleaseError as e:  # one bad manifest must not hide every other release
            lines.append(f"  WARNING {mdl} {v}: {e.what}; fix: `release verify` names what is wrong")
            rows.append([str(v), "?", "?", "unreadable", "?", "?", "-", "-"])
            continue
        size = sum(f["size"] for f in m["files"].values()) / 1e6
        commit = (m.get("git") or {}).get("commit") or "-"
        rows.append(
            [
                str(v),
                m["created_at"][:16].replace("T", " "),
                commit[:7],
                "pass" if m.get("parity", {}).get("pass") else "?",
                str(len(m["files"])),
                f"{size:.1f}",
                ", ".join(e for e, s in states.items() if s.live == v) or "-",
                ", ".join(e for e, s in states.items() if v in s.present) or "-",
            ]
        )
    for e, s in states.items():
        if s.live is not None and s.live not in versions:
            lines.append(f"  WARNING {e}: its pointer names version {s.live}, which is not a release here; fix: release promote --to {e} --version <N>")
    if st.fs.s3 is not None:
        lines += [f"  note: {mdl} {u.version}: {u.describe(st.lock_lease_s)}" for u in unfinished(st, mdl)]
    for e in st.environments:
        lines.append(f"  {e}: serve with tritonserver --model-repository={st.env_repository(e)} --model-control-mode=explicit --load-model={mdl}")
        rec = read_record(st.fs, e, mdl)
        if rec is not None:
            lines.append(f"  {e}: {summary_line(rec)}")
    if st.fs.s3 is not None:
        lines.append("  (tritonserver reads S3 with AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and AWS_DEFAULT_REGION from its environment)")
    return rows, lines
