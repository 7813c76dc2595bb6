"""Live reload through Triton's model repository API (explicit model-control mode).

A switch from version ``old`` to ``new`` is two loads of the same model:

1. ``stage``: load with a config *override* whose version_policy lists both
   ``[old, new]`` (:func:`pipeline.release.store.pointer.handover`: the new release's config without
   its model_warmup). Triton loads ``new`` beside the serving ``old`` (it reloads ``old`` too,
   with this config, in the background: the serving instance answers until the new one is
   ready) and we wait until ``new`` reports ready. Unversioned requests keep going to a ready
   version throughout. The override never touches the store, so nobody reading the store sees
   this transitional state.
2. (the caller flips the environment's config.pbtxt to ``[new]``)
3. ``retire``: load again with the flipped config (override ``[new]``, the same bytes the
   store now holds); Triton unloads ``old``, which finishes its in-flight requests first, and
   reloads ``new`` with the pointer's model_warmup (its own rows) before that instance serves.

If step 1 fails, Triton keeps serving ``old`` and the pointer was never flipped.

A canary (:mod:`pipeline.release.canary.run`) also loads a candidate as a model of its own
(:meth:`TritonReloader.load_beside`, from bytes through Triton's file override), because a
second version of the served model would take every unversioned request: Triton sends those
to the highest-numbered ready version.
"""

from __future__ import annotations

import re
import time

from tritonclient.grpc import model_config_pb2 as mc

from pipeline.core.errors import ReleaseError, ToolError
from pipeline.release.store import pointer
from pipeline.serving.client import TritonClient


class TritonReloader:
    """Switch the served version of one model on a running Triton without dropping requests.

    ``url`` is Triton's HTTP endpoint, ``host:port`` or ``http://host:port``.
    """

    def __init__(self, url: str, model: str, timeout_s: float = 120.0) -> None:
        self.client = TritonClient(url.removeprefix("https://"), "http", load_timeout_s=timeout_s)
        self.url = self.client.url
        self.model = model
        self.timeout_s = timeout_s

    def _fail(self, what: str, e: object, after_flip: bool = False) -> ReleaseError:
        if after_flip:
            fix = (
                f"the store already points at the new version; make Triton re-read it with "
                f"`curl -X POST http://{self.url}/v2/repository/models/{self.model}/load` (or restart it) and check its log"
            )
        else:
            fix = "start tritonserver with --model-control-mode=explicit and --model-repository=<store>/envs/<env>, and check its log; the environment's pointer was not changed"
        return ReleaseError(what, fix=fix, details={"server": self.url, "model": self.model, "error": str(e).strip()[:800]})

    def check(self) -> None:
        """Fail early, before anything changes, if the server is unreachable or not live.

        Raises:
            ReleaseError: with the client's reason.
        """
        if not self.client.live():
            if self.client.last_error:
                raise self._fail(f"cannot reach Triton at {self.url}", self.client.last_error)
            raise self._fail(f"Triton at {self.url} is not live", "is_server_live() returned False")

    def check_explicit(self) -> None:
        """Refuse a server that cannot load or unload models (model-control mode none or poll).

        Unloading a model that is not loaded changes nothing in explicit mode; the other modes refuse
        every unload ("explicit model load / unload is not allowed if polling is enabled").

        Raises:
            ReleaseError: with Triton's answer.
        """
        try:
            self.client.unload(_PROBE)
        except ToolError as e:
            raise ReleaseError(
                f"Triton at {self.url} is not in explicit model-control mode, so it cannot load a version beside the live one",
                fix="restart tritonserver with --model-control-mode=explicit --load-model=<model> (the repository stays the same); nothing was changed",
                details={"server": self.url, "triton said": _reason(e)},
            ) from None

    def ready(self, version: int, name: str | None = None) -> bool:
        """Whether ``version`` of the model (or of model ``name``) is loaded and ready (False when unreachable)."""
        return self.client.model_ready(name or self.model, str(version))

    def wait(self, version: int, want: bool, after_flip: bool = False, name: str | None = None) -> None:
        deadline = time.monotonic() + self.timeout_s
        while time.monotonic() < deadline:
            if self.ready(version, name) == want:
                return
            time.sleep(0.1)
        state = "ready" if want else "unloaded"
        raise self._fail(f"version {version} of '{name or self.model}' did not become {state} within {self.timeout_s:.0f} s", "timeout", after_flip)

    def stage(self, cfg: mc.ModelConfig, old: int | None, new: int) -> None:
        """Load ``new`` next to ``old`` (config override [old, new], no warmup: :func:`pointer.handover`); wait until it is ready."""
        override = pointer.to_json(pointer.handover(cfg, self.model, old, new))
        for attempt in range(1, _STORAGE_ATTEMPTS + 1):
            try:
                self.client.load(self.model, override)
                break
            except ToolError as e:
                # A cloud repository's read can fail for a moment (a HEAD that timed out); nothing was flipped yet,
                # and the load is idempotent, so a transient storage error is tried again before giving up.
                if attempt == _STORAGE_ATTEMPTS or not _STORAGE_ERROR.search(_reason(e)):
                    raise self._fail(f"Triton could not load version {new} of '{self.model}'", _reason(e)) from None
                time.sleep(0.5 * attempt)
        self.wait(new, True)

    def retire(self, old: int | None, new: int, cfg: mc.ModelConfig | None = None) -> None:
        """Reload so ``old`` is unloaded and ``new`` stays ready.

        Without ``cfg``: from the (already flipped) config.pbtxt. With ``cfg``: with an override that
        serves exactly ``[new]``, i.e. the bytes the flip wrote. The override is needed on S3: an
        explicit load without one reloads only if Triton sees the model directory modified, and S3's
        LastModified has one-second resolution, so a flip within the second of the staging load
        was not seen (measured with moto: the old version stayed loaded).
        """
        try:
            self.client.load(self.model, pointer.to_json(pointer.with_policy(cfg, self.model, [new])) if cfg is not None else None)
        except ToolError as e:
            raise self._fail(f"Triton could not reload '{self.model}' from the flipped config.pbtxt", _reason(e), after_flip=True) from None
        if old is not None and old != new:
            self.wait(old, False, after_flip=True)
        if not self.ready(new):
            raise self._fail(f"version {new} of '{self.model}' is not ready after the reload", "not ready", after_flip=True)

    def load_beside(self, name: str, cfg: mc.ModelConfig, version: int, files: dict[str, bytes]) -> None:
        """Load a model directory's files (``{"<version>/<file>": bytes, "warmup/<file>": ...}``) as model ``name``; wait until ready.

        The served model is not touched: its unversioned requests keep going to its own versions.

        Raises:
            ReleaseError: Triton refused the load, or the copy did not become ready in time.
        """
        override = {f"file:{rel}": data for rel, data in files.items()}
        try:
            self.client.load(name, pointer.to_json(pointer.with_policy(cfg, name, [version])), files=override)
        except ToolError as e:
            raise self._fail(f"Triton could not load version {version} of '{self.model}' as '{name}'", _reason(e)) from None
        self.wait(version, True, name=name)

    def unload_beside(self, name: str, version: int) -> None:
        """Unload model ``name`` (a copy loaded with :meth:`load_beside`) and wait until it is gone.

        Raises:
            ReleaseError: Triton refused, or the copy was still ready after the timeout.
        """
        try:
            self.client.unload(name)
        except ToolError as e:
            raise self._fail(f"Triton could not unload '{name}'", _reason(e)) from None
        self.wait(version, False, name=name)

    def close(self) -> None:
        self.client.close()


_STORAGE_ATTEMPTS = 3
# Triton's words for a failed read of an S3/GCS/Azure repository (its cloud filesystems), not for a bad model.
_STORAGE_ERROR = re.compile(r"for bucket with name|Failed to get (object|metadata)|Unable to (get|list)|timed? ?out", re.IGNORECASE)
_PROBE = "__triton_pipeline_mode_probe__"  # a model name nobody loads: unloading it is a no-op in explicit mode


def _reason(e: ToolError) -> str:
    """Triton's own words from a client error (its reason, else what failed)."""
    return str(e.details.get("reason") or e.details.get("error") or e.what)
