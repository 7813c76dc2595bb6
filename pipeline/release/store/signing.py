"""Optional signing of releases with the OpenSSF ``model-signing`` package and a local EC key.

The signature covers the whole release directory (manifest.json and files/), so it also
protects the manifest's checksums: someone able to rewrite both a file and the manifest
still cannot forge the signature. It is written as ``release.sig`` inside the release
before the release is published, which keeps releases immutable.

model-signing works on local paths: a release is signed as a local copy before it is uploaded
(:meth:`pipeline.release.store.store.ReleaseStore.add_release`), and verified from a temporary copy when
the store is remote. ``model-signing`` (and ``pyopenssl``, which it imports but does
not declare) are optional dependencies: without them only signing fails, with a message.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from pipeline.core.errors import ReleaseError
from pipeline.records.release import ReleaseManifest
from pipeline.release.store.fs import StoreFS

SIGNATURE = "release.sig"


def _lib():  # noqa: ANN202 - returns the module
    try:
        import model_signing
    except ImportError as e:
        raise ReleaseError(
            "signing needs the model-signing package",
            fix="pip install model-signing==1.1.1 pyopenssl (or build without --sign-key)",
            details={"error": e},
        ) from None
    return model_signing


def _hashing(ms):  # noqa: ANN001, ANN202
    # The signature file lives inside the signed directory: leave it out of the hash (and an object
    # store's upload claim, a marker that may outlive a killed upload: pipeline/release/store/publish.py).
    return ms.hashing.Config().set_ignored_paths(paths=[SIGNATURE, ".claim"], ignore_git_paths=False)


def _key(path: str | Path, kind: str) -> Path:
    p = Path(path)
    if not p.is_file():
        raise ReleaseError(f"{kind} key not found: {p}", fix=f"pass the path of a PEM-encoded EC {kind} key")
    return p


def sign_path(local: Path, private_key: str | Path, password: str | None = None) -> None:
    """Write ``local/release.sig`` signing everything else under the local directory ``local``.

    Raises:
        ReleaseError: model-signing missing, the key missing or unusable.
    """
    ms = _lib()
    key = _key(private_key, "private")
    with tempfile.TemporaryDirectory(prefix="release-sign-") as tmp:
        sig = Path(tmp) / SIGNATURE
        try:
            ms.signing.Config().use_elliptic_key_signer(private_key=key, password=password).set_hashing_config(_hashing(ms)).sign(local, sig)
        except (ValueError, TypeError, OSError) as e:
            raise ReleaseError("signing the release failed", fix="check that the key is a PEM EC private key (and its password)", details={"key": key, "error": e}) from None
        (local / SIGNATURE).write_bytes(sig.read_bytes())


def verify_dir(fs: StoreFS, rel: str, public_key: str | Path) -> None:
    """Check ``rel/release.sig`` against the directory with ``public_key``.

    Raises:
        ReleaseError: no signature, wrong key, or any file differs from what was signed.
    """
    ms = _lib()
    key = _key(public_key, "public")
    if not fs.exists(f"{rel}/{SIGNATURE}"):
        raise ReleaseError(f"release {fs.path(rel)} is not signed", fix="build it with --sign-key, or promote without --public-key")
    with tempfile.TemporaryDirectory(prefix="release-verify-") as tmp:
        local = fs.local_path(rel) if fs.local else Path(tmp) / "release"
        if not fs.local:
            fs.get_dir(rel, local)
        try:
            ms.verifying.Config().use_elliptic_key_verifier(public_key=key).set_hashing_config(_hashing(ms)).verify(local, local / SIGNATURE)
        except Exception as e:  # noqa: BLE001 - model-signing raises ValueError and several library-specific errors
            raise ReleaseError(
                "signature verification failed: the release was not signed by this key or was changed after signing",
                fix="do not promote it; check --public-key, or restore the release from a trusted archive",
                details={"release": fs.path(rel), "key": key, "error": f"{type(e).__name__}: {str(e)[:600]}"},
            ) from None


def unkeyed_problems(fs: StoreFS, rel: str, manifest: ReleaseManifest) -> list[str]:
    """What can be checked of ``rel/release.sig`` without a key: that it is a bundle and signs these very files.

    Authenticity needs the public key; but a signature whose signed digests no longer match the release (a file or
    the manifest changed after signing, or a bundle that is not one) is invalid for every key, so it is reported.
    """
    import base64
    import hashlib
    import json

    try:
        bundle = json.loads(fs.read_bytes(f"{rel}/{SIGNATURE}"))
        statement = json.loads(base64.b64decode(bundle["dsseEnvelope"]["payload"]))
        signed = {r["name"]: r["digest"] for r in statement["predicate"]["resources"]}
    except (ValueError, KeyError, TypeError) as e:
        return [f"{SIGNATURE} is not a model-signing bundle ({type(e).__name__}): invalid for any key"]
    actual = {f"files/{k}": v.sha256 for k, v in manifest.files.items()}
    actual["manifest.json"] = hashlib.sha256(fs.read_bytes(f"{rel}/manifest.json")).hexdigest()
    changed = sorted(n for n in set(signed) | set(actual) if signed.get(n) != actual.get(n))
    if not changed:
        return []
    return [f"{SIGNATURE} does not sign these files (changed after signing: {', '.join(changed[:5])}{' ...' if len(changed) > 5 else ''}): invalid for any key; do not promote it"]
