"""Optional signing with the model-signing package and a local EC key."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("model_signing", reason="model-signing is optional (pip install model-signing pyopenssl)")
from cryptography.hazmat.primitives import serialization  # noqa: E402
from cryptography.hazmat.primitives.asymmetric import ec  # noqa: E402

from pipeline.core.errors import ReleaseError  # noqa: E402
from pipeline.release.promote import promote  # noqa: E402
from pipeline.release.verify import verify_store  # noqa: E402
from pipeline.release.store.store import ReleaseStore  # noqa: E402
from tests.helpers.release_repo import release_tiny  # noqa: E402


def _keypair(d: Path, name: str) -> tuple[Path, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    priv, pub = d / f"{name}.pem", d / f"{name}.pub.pem"
    priv.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    pub.write_bytes(key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    return priv, pub


def test_signed_release_verifies_and_tampering_is_caught(tmp_path: Path) -> None:
    priv, pub = _keypair(tmp_path, "release")
    _, other_pub = _keypair(tmp_path, "other")
    store = ReleaseStore(tmp_path / "store")
    release_tiny(store, tmp_path, sign_key=priv)
    assert (tmp_path / "store/releases/tiny/1/release.sig").is_file()
    assert verify_store(store, public_key=str(pub))
    assert promote(store, "dev", version=1, public_key=str(pub)).version == 1

    with pytest.raises(ReleaseError, match="signature verification failed"):
        verify_store(store, public_key=str(other_pub))

    # Rewrite a file AND its manifest entry consistently: checksums pass, the signature does not.
    rel = tmp_path / "store/releases/tiny/1"
    (rel / "files/1/model.py").write_text("print('evil')\n")
    m = json.loads((rel / "manifest.json").read_text())
    from pipeline.core.atomic import file_digest

    digest, size = file_digest(rel / "files/1/model.py")
    m["files"]["1/model.py"] = {"sha256": digest, "size": size}
    (rel / "manifest.json").write_text(json.dumps(m))
    assert store.verify_release("tiny", 1)
    with pytest.raises(ReleaseError, match="signature verification failed"):
        promote(store, "staging", version=1, public_key=str(pub))
    assert not (tmp_path / "store/envs/staging").exists()


def test_unsigned_release_with_public_key_is_refused(tmp_path: Path) -> None:
    _, pub = _keypair(tmp_path, "k")
    store = ReleaseStore(tmp_path / "store")
    release_tiny(store, tmp_path)
    with pytest.raises(ReleaseError, match="is not signed"):
        promote(store, "dev", version=1, public_key=str(pub))


def test_signing_on_a_non_local_store(tmp_path: Path) -> None:
    """model-signing needs local paths: a memory:// store is signed and verified through a temp copy."""
    import uuid

    priv, pub = _keypair(tmp_path, "k")
    store = ReleaseStore(f"memory://sign-{uuid.uuid4().hex}")
    release_tiny(store, tmp_path, sign_key=priv)
    assert verify_store(store, public_key=str(pub))
    store.fs.fs.pipe_file(store.fs.path("releases/tiny/1/manifest.json"), store.fs.read_bytes("releases/tiny/1/manifest.json").replace(b'"tiny"', b'"tiny" '))
    with pytest.raises(ReleaseError, match="signature verification failed"):
        verify_store(store, public_key=str(pub))
