"""Build ``pipeline_ort``, our native Triton backend that runs ONNX Runtime (``native/pipeline_ort/``).

The embedded bench server (nvidia-pytriton's tritonserver) has no onnxruntime backend. The
python-backend stand-in (:mod:`pipeline.serving.python_standin`) pays for a second process
and Python on every batch; this C++ backend runs ORT inside tritonserver like Triton's own
onnxruntime backend does, so the served path measured is the real one minus only the backend's
implementation.

What the build needs, all from registries these machines reach:

- g++ (on every machine kind here);
- the ONNX Runtime C/C++ API headers and nlohmann/json (header-only), from Debian's
  ``libonnxruntime-dev`` and ``nlohmann-json3-dev`` packages, fetched by ``scripts/setup.sh``
  (checksums pinned below) into ``.tools/``;
- at run time, the ``libonnxruntime`` the onnxruntime wheel ships (the same build the in-process
  baseline uses), dlopen()ed by path; Triton's API comes from the server process.

The library is built once per source/header/compiler combination into the project cache and
copied into each generated model directory (Triton loads ``<model>/libtriton_<backend>.so``).
"""

from __future__ import annotations

import hashlib
import io
import shutil
import subprocess
import sys
import tarfile
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from pipeline import exit_with
from pipeline.core.atomic import atomic_path
from pipeline.core.errors import ToolError
from pipeline.serving.install import TritonInstall, backend_dir, cache_dir

ROOT = Path(__file__).resolve().parents[2]
SOURCE_DIR = ROOT / "native" / "pipeline_ort"
TOOLS_DIR = ROOT / ".tools" / "native-headers"
BACKEND_NAME = "pipeline_ort"
LIBRARY_NAME = f"libtriton_{BACKEND_NAME}.so"


@dataclass(frozen=True)
class HeaderPackage:
    """A Debian package whose headers the build needs, pinned by checksum."""

    url: str
    sha256: str
    include: str  # the directory inside the package that goes on the include path


DEBIAN_POOL = "https://deb.debian.org/debian/pool/main"
HEADER_PACKAGES = (
    # ONNX Runtime 1.21's C API headers; the wheel's 1.2x/1.3x library serves C API version 21 (ORT keeps old API
    # versions). Only headers are used, never Debian's library.
    HeaderPackage(
        f"{DEBIAN_POOL}/o/onnxruntime/libonnxruntime-dev_1.21.0+dfsg-1_amd64.deb",
        "14f7d959d5deacbcf1504830d4189f91fc67382b399ed9ae9d3aa9c4050ced08",
        "usr/include/onnxruntime",
    ),
    HeaderPackage(
        f"{DEBIAN_POOL}/n/nlohmann-json3/nlohmann-json3-dev_3.11.3-2.1_all.deb",
        "741a6a32f61a14eaf9560ba1814b27da8e78fa3b9bed9e8867ab46316ddf3793",
        "usr/include",
    ),
)


def _deb_data(raw: bytes, name: str) -> tarfile.TarFile:
    """The ``data.tar.*`` member of a .deb (an ar archive), opened for extraction."""
    if not raw.startswith(b"!<arch>\n"):
        raise ToolError(f"{name} is not a Debian package", fix="check the URL in HEADER_PACKAGES")
    pos = 8
    while pos + 60 <= len(raw):
        member = raw[pos : pos + 16].decode().strip().rstrip("/")
        size = int(raw[pos + 48 : pos + 58].decode().strip())
        body = pos + 60
        if member.startswith("data.tar"):
            return tarfile.open(fileobj=io.BytesIO(raw[body : body + size]), mode="r:*")
        pos = body + size + (size % 2)  # ar pads members to an even offset
    raise ToolError(f"{name} has no data.tar member", fix="check the URL in HEADER_PACKAGES")


def fetch_headers(dest: Path = TOOLS_DIR) -> list[Path]:
    """Download and unpack the header packages into ``dest`` (once); return the include dirs.

    Raises:
        ToolError: a download failed or its checksum differs from the pinned one.
    """
    includes = []
    for pkg in HEADER_PACKAGES:
        name = pkg.url.rsplit("/", 1)[1]
        out = dest / name.removesuffix(".deb")
        if not (out / pkg.include).is_dir():
            try:
                with urllib.request.urlopen(pkg.url, timeout=120) as r:  # noqa: S310 - pinned Debian URL
                    data = r.read()
            except OSError as e:
                raise ToolError(
                    f"cannot download {name} from Debian",
                    fix="check access to deb.debian.org; if the pool dropped this version, update HEADER_PACKAGES",
                    details={"url": pkg.url, "error": e},
                ) from None
            digest = hashlib.sha256(data).hexdigest()
            if digest != pkg.sha256:
                raise ToolError(f"{name}: checksum mismatch", fix="do not use this download", details={"expected": pkg.sha256, "got": digest})
            with atomic_path(out) as tmp, _deb_data(data, name) as tar:
                tar.extractall(tmp, filter="data")
        includes.append(out / pkg.include)
    return includes


def ort_library() -> Path:
    """The libonnxruntime shared library inside the installed onnxruntime wheel."""
    import onnxruntime

    capi = Path(onnxruntime.__file__).parent / "capi"
    libs = sorted(capi.glob("libonnxruntime.so*"))
    if not libs:
        raise ToolError(
            f"the onnxruntime wheel at {capi} ships no libonnxruntime.so",
            fix="install onnxruntime >= 1.20 (its wheels ship the C library), or set bench.embedded_backend=python",
        )
    return libs[-1]


def _sources() -> list[Path]:
    return sorted(p for p in SOURCE_DIR.iterdir() if p.suffix in {".cc", ".h"})


def build(out_root: Path | None = None, compiler: str = "g++") -> Path:
    """Compile the backend (once per source, headers and compiler) and return the library's path.

    Raises:
        ToolError: no compiler, headers not fetched, or the compile failed (with its messages).
    """
    cxx = shutil.which(compiler)
    if cxx is None:
        raise ToolError(
            f"{compiler} not found: the native bench backend is compiled from native/pipeline_ort",
            fix="install g++ (Debian: apt-get install g++), or set bench.embedded_backend=python",
        )
    includes = [TOOLS_DIR / pkg.url.rsplit("/", 1)[1].removesuffix(".deb") / pkg.include for pkg in HEADER_PACKAGES]
    missing = [str(p) for p in includes if not p.is_dir()]
    if missing:
        raise ToolError("the native backend's build headers are not installed", fix="run bash scripts/setup.sh (it fetches them)", details={"missing": ", ".join(missing)})
    version = subprocess.run([cxx, "--version"], capture_output=True, text=True, check=False).stdout.splitlines()[:1]
    # Headers by their pinned package checksum, not their path: every copy of the project (its .tools/ may be
    # anywhere) shares one build of the same sources.
    key = hashlib.sha256()
    for part in [*(p.read_bytes() for p in _sources()), *(pkg.sha256.encode() for pkg in HEADER_PACKAGES), *(v.encode() for v in version)]:
        key.update(part)
    out = (out_root or cache_dir()) / f"{BACKEND_NAME}-{key.hexdigest()[:12]}"
    lib = out / LIBRARY_NAME
    if lib.is_file():
        return lib
    with atomic_path(out) as tmp:
        tmp.mkdir()
        cmd = [
            cxx,
            "-std=c++17",
            "-O2",
            "-fPIC",
            "-shared",
            "-Wall",
            "-Wextra",
            *(f"-I{p}" for p in includes),
            str(SOURCE_DIR / "pipeline_ort.cc"),
            "-o",
            str(tmp / LIBRARY_NAME),
            "-ldl",
        ]
        res = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if res.returncode != 0:
            raise ToolError(
                "compiling the native bench backend failed",
                fix="see the compiler's messages; or set bench.embedded_backend=python",
                details={"command": " ".join(cmd), "stderr": res.stderr[-3000:]},
            )
    return lib


def onnxruntime_backend_dir(inst: TritonInstall) -> Path:
    """A ``--backend-directory`` where this backend stands in for Triton's onnxruntime one, beside the python backend.

    The wheel's tritonserver has no onnxruntime backend, so a shipped repository (``backend: "onnxruntime"``) cannot
    load as-is. With this directory it does: Triton loads ``onnxruntime/libtriton_onnxruntime.so``, which is this
    library; it serves each config's own file with the scheduling and ORT settings the config holds, and loads ONNX
    Runtime from ``$PIPELINE_ORT_LIBRARY`` (:func:`standin_env`). It is a stand-in, and the logs say so
    ("pipeline_ort: ..."): used to serve environments and canaries on CPU test machines, never shipped.
    """
    lib, base = build(), backend_dir(inst)
    key = hashlib.sha256(f"{lib}|{base}".encode()).hexdigest()[:10]
    out = cache_dir() / f"triton-backends-ort-standin-{key}"
    if (out / "onnxruntime" / "libtriton_onnxruntime.so").is_file():
        return out
    with atomic_path(out) as tmp:
        shutil.copytree(base / "python", tmp / "python", symlinks=True)
        (tmp / "onnxruntime").mkdir()
        shutil.copy2(lib, tmp / "onnxruntime" / "libtriton_onnxruntime.so")
    return out


def standin_env() -> dict[str, str]:
    """What the stand-in needs in the server's environment: the ONNX Runtime library it loads."""
    return {"PIPELINE_ORT_LIBRARY": str(ort_library())}


def main() -> int:
    """``python -m pipeline.serving.native_backend``: fetch headers and build (scripts/setup.sh runs this)."""
    try:
        fetch_headers()
        print(f"native bench backend: {build()}")
    except ToolError as e:
        print(e, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    exit_with(main)
