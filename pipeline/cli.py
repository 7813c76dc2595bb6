"""The user-facing command ``triton-pipeline``.

``doctor`` checks what this machine can run; ``release`` groups the release commands
(more sub-apps are added with ``app.add_typer``). Every command turns a
:class:`~pipeline.core.errors.PipelineError` into one message on stderr and a non-zero
exit code, without a traceback.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional, ParamSpec, TypeVar

import typer
from rich.console import Console
from rich.table import Table

from pipeline import exit_with
from pipeline.core.config import PipelineConfig, ReleaseConfig, load_config
from pipeline.cli_print import print_build, print_switch
from pipeline.core.errors import CanaryRejected, PipelineError, ReleaseError, print_error

if TYPE_CHECKING:
    from pipeline.release.store.store import ReleaseStore

_interrupt_said = False


def _say_interrupted() -> None:
    """Print the one line a Ctrl-C gets (once, wherever it was caught)."""
    global _interrupt_said
    if not _interrupt_said:
        _interrupt_said = True
        print("interrupted", file=sys.stderr, flush=True)


class _App(typer.Typer):
    """Typer turns a Ctrl-C outside a command's body (building the CLI, parsing options) into a
    silent exit 130; commands say "interrupted" themselves (:func:`_one_message`). This says it
    for the rest, so every Ctrl-C prints exactly one line. An interrupt during ``import`` is
    handled by the hook in :mod:`pipeline`."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().__call__(*args, **kwargs)
        except KeyboardInterrupt:  # before typer's own handler runs
            _say_interrupted()
            raise SystemExit(130) from None
        except SystemExit as e:
            if e.code == 130:
                _say_interrupted()
            raise


app = _App(help="Build, ship and operate Triton model repositories.", no_args_is_help=True, pretty_exceptions_enable=False)
release_app = typer.Typer(help="Immutable, checksummed releases; promotion and rollback across environments.", no_args_is_help=True)
app.add_typer(release_app, name="release")

# markup=False: messages hold paths and lists like "[1, 2]" that rich would read as style tags.
out = Console(highlight=False, soft_wrap=True, markup=False)
err = Console(stderr=True, highlight=False, soft_wrap=True, markup=False)
P = ParamSpec("P")
R = TypeVar("R")
_PIPE_WIDTH = 1000  # tables are only as wide as their content; this just lifts rich's 80-column default


def _one_message(fn: Callable[P, R]) -> Callable[P, R]:
    """Print a PipelineError as one message and exit with its code (no traceback)."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return fn(*args, **kwargs)
        except PipelineError as e:
            raise typer.Exit(print_error(e)) from None
        except OSError as e:  # a filesystem failure no check anticipated (disk full, I/O error): still one message
            fix = "check the path, free space and permissions named above"
            print_error(PipelineError(f"{type(e).__name__}: {e}", fix=fix))
            raise typer.Exit(1) from None
        except KeyboardInterrupt:
            _say_interrupted()
            raise typer.Exit(130) from None

    return wrapper


@app.command("doctor")
def doctor() -> None:
    """Check the tools this machine can run: tritonserver, perf_analyzer, GPUs and TensorRT."""
    from pipeline.serving.perf_analyzer import locate_perf_analyzer
    from pipeline.serving.install import locate_tritonserver
    from pipeline.engines.probe import probe_machine

    table = Table("check", "status", "detail")
    failed = False
    for name, locate in (("tritonserver", locate_tritonserver), ("perf_analyzer", locate_perf_analyzer)):
        try:
            found = locate()
            table.add_row(name, "ok", str(getattr(found, "binary", found)))
        except PipelineError as e:
            failed = True
            table.add_row(name, "MISSING", e.render())
    probe = probe_machine()
    gpus = probe.get("gpus") or []
    table.add_row("GPUs", "ok" if gpus else "none", ", ".join(f"{g.get('name')} (sm {g.get('compute_capability')})" for g in gpus) or "GPU targets will be skipped")
    trt = probe.get("tensorrt") or {}
    table.add_row("TensorRT", "ok" if trt.get("version") else "absent", str(trt.get("version") or trt.get("error") or "engine stages will be skipped"))
    out.print(table)
    if failed:
        raise typer.Exit(1)


# ---------------------------------------------------------------- shared options
StoreOpt = typer.Option(None, "--store", help="release store: a path or fsspec URL (default: release.store in params.yaml)")
ModelOpt = typer.Option(None, "--model", help="model name (default: the only model in the store)")
ParamsOpt = typer.Option(Path("params.yaml"), "--params", help="composed config to read release.* from")
TagOpt = typer.Option(True, "--tag/--no-tag", help="record the operation as a GTO git tag in the current repository")
AllowUncheckedOpt = typer.Option(False, "--allow-unchecked-evidence", help="promote into production a release built with --unchecked-evidence")


def _config(params: Path) -> PipelineConfig:
    """params.yaml when it exists, else the schema defaults."""
    return load_config(params) if params.is_file() else PipelineConfig()


def _release_config(params: Path) -> ReleaseConfig:
    """release.* from params.yaml when it exists, else the schema defaults."""
    return _config(params).release


def _store(store: Optional[str], params: Path, cfg: Optional[ReleaseConfig] = None, allow_unchecked: bool = False):  # noqa: ANN202 - ReleaseStore, imported lazily
    from pipeline.release.store.store import ReleaseStore

    cfg = cfg or _release_config(params)
    st = ReleaseStore(store or cfg.store, cfg.environments, cfg.lock_lease_s, cfg.public_key or None, cfg.require_signature)
    st.checked_evidence_envs = cfg.environments[-1:] if cfg.production_requires_checked_evidence and not allow_unchecked else []
    return st


def _git_repo(tag: bool) -> Optional[str]:
    if not tag:
        return None
    from pipeline.release.evidence.provenance import git_info

    return git_info(".").toplevel


# ---------------------------------------------------------------- release commands
@release_app.command("build")
@_one_message
def build(
    repository: Path = typer.Option(Path("artifacts/model_repository"), help="the repository stage's output (or one model dir in it)"),
    parity: Path = typer.Option(Path("artifacts/reports/parity.json"), help="parity report; refused unless it passed and covers the served files by sha256"),
    bench: Path = typer.Option(Path("artifacts/reports/bench.json"), help="bench report (optional; its summary goes in when it measured these exact files)"),
    dvc_lock: Path = typer.Option(Path("dvc.lock"), help="dvc.lock whose recorded hashes go into the manifest"),
    sign_key: Optional[Path] = typer.Option(None, help="PEM EC private key: sign the release with model-signing"),
    unchecked_evidence: bool = typer.Option(False, "--unchecked-evidence", help="build from evidence that is not the DVC outputs dvc.lock records (recorded in the manifest)"),
    model: Optional[str] = ModelOpt,
    store: Optional[str] = StoreOpt,
    params: Path = ParamsOpt,
    tag: bool = TagOpt,
) -> None:
    """Freeze the current repository into the next immutable, checksummed release (one per model in it).

    Refused while the DVC pipeline behind the repository is out of date (`dvc repro repository` fixes it).
    """
    from pipeline.release.build import BuildInputs, model_names, plan_release, publish_release
    from pipeline.release.evidence import dvc_check

    st = _store(store, params)
    dvc = dvc_check.check(repository, parity, bench, unchecked_evidence)  # once for the whole repository
    # A repository with TensorRT engines holds <name> and <name>_trt: each has its own version line.
    # Both are checked before either is written, so they are released together or not at all.
    inputs = BuildInputs(repository, parity, bench, dvc_lock, git_cwd=".")
    names: list[str | None] = [model] if model else [*model_names(repository)] or [None]  # None: find_model_dir says what is missing
    plans = [plan_release(st, inputs, model=name, tag=tag, dvc=dvc) for name in names]
    for plan in plans:
        print_build(out, st, publish_release(st, plan, sign_key), sign_key)


@release_app.command("promote")
@_one_message
def promote_cmd(
    to: str = typer.Option(..., "--to", help="environment to promote into (release.environments)"),
    version: Optional[int] = typer.Option(None, "--version", help="release version (default: live in the previous environment, else newest)"),
    reload: Optional[list[str]] = typer.Option(
        None, "--reload", help="Triton URL (host:port, explicit model-control mode) to load the new version live; repeat (or comma-separate) for each server of a fleet"
    ),
    variant: Optional[str] = typer.Option(None, "--variant", help="config variant to serve (configs/<variant>.pbtxt; default: the release's config.pbtxt)"),
    public_key: Optional[Path] = typer.Option(None, help="PEM EC public key: require a valid model-signing signature"),
    allow_unchecked: bool = AllowUncheckedOpt,
    model: Optional[str] = ModelOpt,
    store: Optional[str] = StoreOpt,
    params: Path = ParamsOpt,
    tag: bool = TagOpt,
) -> None:
    """Verify a release, install it in an environment and flip the environment's pointer to it."""
    from pipeline.release.promote import SwitchOptions, promote
    from pipeline.release.promote_set import promote_set

    cfg = _config(params)
    st = _store(store, params, cfg.release, allow_unchecked=allow_unchecked)
    names, follow = _set_of(st, model, cfg)
    key = str(public_key) if public_key else None
    if len(names) == 1:
        print_switch(out, promote(st, to, names[0], version, variant, reload, key, _git_repo(tag)), tag)
        return
    # The text endpoint and the TensorRT model switch with the model, at the releases built with that version.
    for res in promote_set(st, to, names, version, variant, SwitchOptions.of(reload, key, _git_repo(tag)), follow):
        print_switch(out, res, tag)


@release_app.command("rollback")
@_one_message
def rollback_cmd(
    env: str = typer.Option(..., "--env", help="environment to roll back"),
    reload: Optional[list[str]] = typer.Option(None, "--reload", help="Triton URL to switch the served version live; repeat (or comma-separate) for each server of a fleet"),
    public_key: Optional[Path] = typer.Option(None, help="PEM EC public key: require a valid signature"),
    model: Optional[str] = ModelOpt,
    store: Optional[str] = StoreOpt,
    params: Path = ParamsOpt,
    tag: bool = TagOpt,
) -> None:
    """Make the previously live version live again (the newer release is kept)."""
    from pipeline.release.promote import SwitchOptions, rollback
    from pipeline.release.promote_set import rollback_set

    cfg = _config(params)
    st = _store(store, params, cfg.release)
    names, follow = _set_of(st, model, cfg)
    key = str(public_key) if public_key else None
    if len(names) == 1:
        print_switch(out, rollback(st, env, names[0], reload, key, _git_repo(tag)), tag)
        return
    for res in rollback_set(st, env, names, SwitchOptions.of(reload, key, _git_repo(tag)), follow):
        print_switch(out, res, tag)


def _set_of(st: ReleaseStore, model: str | None, cfg: PipelineConfig) -> tuple[list[str], bool]:
    """The models one promote or rollback switches, the model first, and whether the others only follow it: a model
    named with --model switches alone, and its companions (a text endpoint calls it) keep their versions but call its
    new one."""
    if model is None:
        return st.model_set(None, _companions(cfg)), False
    models = st.models()
    return [st.resolve_model(model), *(model + sfx for sfx in _companions(cfg) if model + sfx in models)], True


def _companions(cfg: PipelineConfig) -> tuple[str, ...]:
    """The suffixes of the models the repository ships beside the model: its TensorRT model, its text endpoint."""
    from pipeline.repository.text_endpoint import SUFFIX

    return (cfg.repository.trt_model_suffix, SUFFIX)


def _seconds(text: Optional[str]) -> Optional[float]:
    """``60s``, ``2m``, ``90`` (seconds) as seconds; None stays None (the config's value)."""
    if text is None:
        return None
    t = text.strip().lower()
    scale = 60.0 if t.endswith("m") else 1.0
    try:
        seconds = float(t.removesuffix("m").removesuffix("s")) * scale
    except ValueError:
        seconds = float("nan")
    if not 0 < seconds <= 86400:  # also NaN and inf: a canary holds the environment's lock while it runs
        raise ReleaseError(f"--duration {text!r} is not a duration between 1 s and 24 h", fix="give seconds or minutes: --duration 60s, --duration 2m, --duration 90")
    return seconds


@release_app.command("canary")
@_one_message
def canary_cmd(
    env: str = typer.Option(..., "--env", help="environment whose live version the candidate is judged against"),
    version: Optional[int] = typer.Option(None, "--version", help="the candidate release"),
    reload: Optional[list[str]] = typer.Option(
        None, "--reload", help="Triton URL (host:port, HTTP, explicit model-control mode) serving the environment; the first one judges, all switch on a pass"
    ),
    traffic: Optional[str] = typer.Option(
        None, "--traffic", help="replay (the samples to both versions) or real (a perf_analyzer load, --share of it to the candidate); default: release.canary.traffic"
    ),
    share: Optional[float] = typer.Option(None, "--share", help="the candidate's share of a real load (implies --traffic real; default: release.canary.share)"),
    duration: Optional[str] = typer.Option(None, "--duration", help="traffic time, e.g. 60s or 2m (default: release.canary.duration_s)"),
    inputs: Optional[Path] = typer.Option(
        None,
        "--inputs",
        help="more rows to replay: a Polygraphy inputs JSON or .npz (the releases' own samples are always sent); "
        "for a text endpoint (<model>_text), the sentences to send: a .txt file, one per line",
    ),
    metrics: Optional[str] = typer.Option(None, "--metrics", help="Triton's metrics endpoint host:port for per-version numbers (default: the judging server's host, port 8002)"),
    abort: bool = typer.Option(False, "--abort", help="clean up after a canary that died: unload its candidate, serve what the pointer names"),
    variant: Optional[str] = typer.Option(None, "--variant", help="config variant of the candidate (default: the one the live version was promoted with)"),
    public_key: Optional[Path] = typer.Option(None, help="PEM EC public key: require a valid model-signing signature on the candidate"),
    allow_unchecked: bool = AllowUncheckedOpt,
    model: Optional[str] = ModelOpt,
    store: Optional[str] = StoreOpt,
    params: Path = ParamsOpt,
    tag: bool = TagOpt,
) -> None:
    """Serve a candidate beside the live version, judge outputs, p99 and errors, then promote it or unload it."""
    from pipeline.release.canary.prepare import Candidate, checked
    from pipeline.release.canary.run import abort_canary, run_canary
    from pipeline.release.promote import SwitchOptions

    cfg = _config(params)
    st = _store(store, params, cfg.release, allow_unchecked)
    if abort:
        for line in abort_canary(st, env, model, reload, cfg.release.canary.load_timeout_s):
            out.print(f"abort: {line}")
        return
    if version is None:
        raise ReleaseError("release canary needs the candidate's --version", fix="pass --version <N> (`release list` shows the releases), or --abort")
    canary = checked(cfg.release.canary, traffic=traffic, share=share, duration_s=_seconds(duration))

    def say(line: str) -> None:
        out.print(line)
        out.file.flush()  # a phase line is out before the phase starts, even in a pipe

    say(f"canary: version {version} against the live version of '{env}' ({canary.traffic} traffic, {canary.duration_s:g} s)")
    opts = SwitchOptions.of(reload, str(public_key) if public_key else None, _git_repo(tag))
    res = run_canary(st, Candidate(env, version, model, variant), opts, canary, cfg.parity, inputs, metrics, say)
    from pipeline.release.canary.report import markdown

    out.print("")
    out.print(markdown(res.report))
    out.print("wall time (s): " + ", ".join(f"{k.removesuffix('_s').replace('_', ' ')} {v:.2f}" for k, v in res.timings.items()))
    out.print(f"record: {res.record} (and .md)")
    if res.promotion is not None:
        print_switch(out, res.promotion, tag)
    if not res.passed:
        raise CanaryRejected(
            f"the canary rejected version {version} of '{res.report.model}' in '{env}'",
            fix="see the failed checks above; the bounds are release.canary.* (conf/release/default.yaml)",
            details={"failed": res.report.verdict.summary if res.report.verdict else ""},
        )


@release_app.command("list")
@_one_message
def list_cmd(model: Optional[str] = ModelOpt, store: Optional[str] = StoreOpt, params: Path = ParamsOpt) -> None:
    """Releases in the store and where each is live."""
    st = _store(store, params)
    models = [st.resolve_model(model)] if model else st.models()
    if not models:
        out.print(f"no releases in {st.url}")
        return
    from pipeline.release.listing import COLUMNS, describe

    for mdl in models:
        rows, lines = describe(st, mdl)
        table = Table(title=f"{mdl} releases in {st.url}")
        for col in COLUMNS:
            table.add_column(col, no_wrap=True)
        for row in rows:
            table.add_row(*row)
        _print_table(table)
        for line in lines:
            out.print(line)


def _print_table(table: Table) -> None:
    """A table at its natural width off a terminal (a pipe, a CI log), where rich would cut it at 80 columns."""
    if out.is_terminal:
        out.print(table)
        return
    Console(file=out.file, highlight=False, markup=False, width=_PIPE_WIDTH).print(table)


@release_app.command("verify")
@_one_message
def verify_cmd(
    public_key: Optional[Path] = typer.Option(None, help="also check every release's model-signing signature"),
    model: Optional[str] = ModelOpt,
    store: Optional[str] = StoreOpt,
    params: Path = ParamsOpt,
) -> None:
    """Re-hash every release and every environment's installed versions against the manifests."""
    from pipeline.release.verify import verify_store

    st = _store(store, params)
    for line in verify_store(st, model, str(public_key) if public_key else None):
        out.print(line)
    out.print(f"store {st.url}: all checksums match")


@release_app.command("gc")
@_one_message
def gc_cmd(model: Optional[str] = ModelOpt, store: Optional[str] = StoreOpt, params: Path = ParamsOpt) -> None:
    """Remove the .staging-* leftovers of killed copies (an environment's under its lock; a release's once an hour old)."""
    from pipeline.release.verify import gc

    st = _store(store, params)
    models = [st.resolve_model(model)] if model else st.models()
    removed = [rel for m in models for rel in gc(st, m)]
    for rel in removed:
        out.print(f"removed {st.fs.show(rel)}")
    out.print(f"store {st.url}: {len(removed)} leftover(s) removed")


@release_app.command("export")
@_one_message
def export_cmd(
    version: int = typer.Option(..., "--version"),
    out_path: Path = typer.Option(..., "--out", help="archive to write (.tar.gz)"),
    model: Optional[str] = ModelOpt,
    store: Optional[str] = StoreOpt,
    params: Path = ParamsOpt,
) -> None:
    """Write one verified release as a .tar.gz (to import into another store)."""
    from pipeline.release.archive import export_release

    st = _store(store, params)
    path = export_release(st, st.resolve_model(model), version, out_path)
    out.print(f"exported version {version} -> {path} ({path.stat().st_size / 1e6:.1f} MB)")


@release_app.command("import")
@_one_message
def import_cmd(archive: Path = typer.Argument(..., help="a .tar.gz written by `release export`"), store: Optional[str] = StoreOpt, params: Path = ParamsOpt) -> None:
    """Add an exported release to the store (unpacked with tarfile's data filter, then verified)."""
    from pipeline.release.archive import import_release

    model, version, what = import_release(_store(store, params), archive)
    out.print(f"{what}: {model} version {version}")


def main() -> None:  # pragma: no cover - console entry: `triton-pipeline` and `python -m pipeline.cli`
    exit_with(app)


if __name__ == "__main__":  # pragma: no cover
    main()
