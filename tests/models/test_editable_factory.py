"""Your own model as users lay it out (issue 28, item B): a factory in a package installed with ``pip install -e``.

The package lives outside the project (a tiny pyproject.toml package in tmp_path) and is installed editable into a
throwaway venv, never into the project's own: setuptools serves it through its ``__editable___*_finder`` import hook,
not a sys.path entry. The probe and export stages run as DVC runs them (``python -m pipeline.stages.<stage>``) with
that venv's python and ``model=example_custom model.factory._target_=acme_models.nets.build``; editing the package's
source changes the probe's model record, so ``dvc repro`` reruns export (and leaves it alone otherwise).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from tests.helpers.project import DVC, ran

pytestmark = pytest.mark.dvc


PYPROJECT = """\
[build-system]
requires = ["setuptools>=64"]
build-backend = "setuptools.build_meta"

[project]
name = "acme-models"
version = "0.1.0"

[tool.setuptools.packages.find]
include = ["acme_models*"]
"""

NETS = """\
import torch


class Tiny(torch.nn.Module):
    def __init__(self, features: int, classes: int) -> None:
        super().__init__()
        self.head = torch.nn.Linear(features, classes)

    def forward(self, features: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        logits = self.head(features){scale}
        return logits, logits.softmax(dim=-1)


def build(features: int = 12, hidden: int = 64, classes: int = 3) -> torch.nn.Module:
    torch.manual_seed(0)
    return Tiny(features, classes)
"""

# The project's stages as dvc.yaml runs them (same modules and flags), with the throwaway venv's python.
DVC_YAML = """\
stages:
  probe:
    cmd: {py} -m pipeline.stages.probe --params params.yaml --out out/probe.json --model-record out/model.json --data-record out/data.json
    always_changed: true
    outs:
      - out/model.json:
          cache: false
      - out/data.json:
          cache: false
  export:
    cmd: {py} -m pipeline.stages.export --params params.yaml --out out/model.onnx --report out/export.json
    deps:
      - out/model.json
      - out/data.json
    outs:
      - out/model.onnx
      - out/export.json
"""


def run(cmd: list[str], cwd: Path, env: dict[str, str] | None = None, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    res = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert res.returncode == 0, f"{cmd} failed ({res.returncode}):\n{res.stdout}\n{res.stderr}"
    return res


def throwaway_venv(where: Path) -> Path:
    """A venv that sees the project's installed packages (torch, onnx, pipeline) but installs into itself.

    ``--system-site-packages`` would see the base interpreter's, not this venv's; a ``.pth`` whose ``import`` line
    calls ``site.addsitedir`` adds the outer site-packages *and* processes its own .pth files (the editable
    install of this project among them), which a plain path line would not.
    """
    run([sys.executable, "-m", "venv", "--without-pip", str(where)], cwd=where.parent)  # pip comes from the outer env
    py = where / "bin" / "python"
    inner = Path(run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], cwd=where).stdout.strip())
    (inner / "outer_env.pth").write_text(f"import site; site.addsitedir({sysconfig.get_paths()['purelib']!r})\n")
    return py


def test_a_factory_in_an_editable_package_is_probed_exported_and_rerun_on_edit(tmp_path: Path, make_params) -> None:
    pytest.importorskip("setuptools")  # --no-build-isolation builds with the setuptools already installed: no network
    pkg = tmp_path / "acme"  # outside the project root, as a user's own repository is
    (pkg / "acme_models").mkdir(parents=True)
    (pkg / "pyproject.toml").write_text(PYPROJECT)
    (pkg / "acme_models" / "__init__.py").write_text("")
    nets = pkg / "acme_models" / "nets.py"
    nets.write_text(NETS.format(scale=""))

    py = throwaway_venv(tmp_path / "venv")
    run([str(py), "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--no-index", "-e", str(pkg)], cwd=tmp_path)
    inner = Path(run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], cwd=tmp_path).stdout.strip())
    assert list(inner.glob("__editable___acme_models*_finder.py")), sorted(p.name for p in inner.iterdir())  # the import hook, not a path
    where = run([str(py), "-c", "import acme_models.nets as m; print(m.__file__)"], cwd=tmp_path).stdout.strip()
    assert Path(where) == nets
    assert subprocess.run([sys.executable, "-c", "import acme_models"], cwd=tmp_path, capture_output=True).returncode != 0  # not in ours

    work = tmp_path / "work"
    work.mkdir()
    params = make_params("model=example_custom", "model.factory._target_=acme_models.nets.build", "model.checkpoint=null")
    (work / "params.yaml").write_text(params.read_text())
    (work / "dvc.yaml").write_text(DVC_YAML.format(py=py))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # pipeline comes through the venv, as a user's would
    env["DVC_NO_ANALYTICS"] = "1"
    run([*DVC, "init", "-q", "--no-scm"], cwd=work, env=env)

    first = run([*DVC, "repro"], cwd=work, env=env)
    assert ran(first.stdout) == ["probe", "export"], first.stdout
    record = (work / "out" / "model.json").read_text()
    factory = json.loads(record)["factory"]
    assert factory["module"] == "acme_models.nets"
    assert [f["path"] for f in factory["files"]] == [str(pkg / "acme_models" / "__init__.py"), str(nets)]  # by content
    assert factory["imports"]["torch"]["distribution"] == "torch"  # installed code by version, not hashed as the user's
    assert [o["name"] for o in json.loads((work / "out" / "export.json").read_text())["outputs"]] == ["logits", "probs"]

    again = run([*DVC, "repro"], cwd=work, env=env)
    assert ran(again.stdout) == ["probe"] and (work / "out" / "model.json").read_text() == record, again.stdout

    nets.write_text(NETS.format(scale=" * 2.0"))  # the user edits their model: no param changes
    edited = run([*DVC, "repro"], cwd=work, env=env)
    assert ran(edited.stdout) == ["probe", "export"], edited.stdout
    after = json.loads((work / "out" / "model.json").read_text())["factory"]
    assert after["files"][0] == factory["files"][0] and after["files"][1]["sha256"] != factory["files"][1]["sha256"]
