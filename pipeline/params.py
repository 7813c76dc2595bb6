"""Compose conf/ into params.yaml, exactly as `dvc exp run` does.

DVC composes Hydra only on `dvc exp run` (hydra.enabled), never on `dvc repro`.
We commit the composed params.yaml so `dvc repro` on a fresh clone works, and
regenerate it with the *same* DVC function, so both paths give byte-identical
params (tests/unit/test_params.py checks the committed file is current).

    python -m pipeline.params                     # defaults
    python -m pipeline.params model=cnn targets='[cpu,a100]'
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from pipeline.core.config import load_config
from pipeline.core.errors import ConfigError, PipelineError
from pipeline.core.atomic import atomic_path

ROOT = Path(__file__).resolve().parent.parent


def compose(overrides: list[str], conf_dir: Path = ROOT / "conf", config_name: str = "config") -> str:
    """Return the YAML text DVC's Hydra integration writes for these overrides."""
    from dvc.utils.hydra import compose_and_dump  # the function `dvc exp run` calls
    from hydra.errors import HydraException

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "params.yaml"
        try:
            compose_and_dump(out, str(conf_dir.resolve()), None, config_name, str(conf_dir), overrides)
        except (HydraException, ValueError, OSError) as e:  # yaml errors are ValueErrors
            raise ConfigError(
                "Hydra could not compose conf/ with the given overrides",
                fix="check the override names against conf/ (groups: model, export, precision, target, variant, "
                "parity, bench, release)",
                details={"overrides": overrides, "error": str(e).splitlines()[0]},
            ) from None
        return out.read_text(encoding="utf-8")


def write_params(overrides: list[str], out: Path = ROOT / "params.yaml", conf_dir: Path = ROOT / "conf") -> Path:
    """Compose, validate against the schema, then atomically replace ``out``."""
    text = compose(overrides, conf_dir)
    with atomic_path(out) as tmp:
        tmp.write_text(text, encoding="utf-8")
        load_config(tmp, origin=f"params composed from conf/ with overrides {overrides}")  # a typo fails here, before params.yaml changes
    return out


def main(argv: list[str] | None = None) -> int:
    """CLI: ``python -m pipeline.params [hydra overrides...]``."""
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        path = write_params(args)
    except PipelineError as e:
        print(f"error: {e.render()}", file=sys.stderr)
        return e.exit_code
    print(f"wrote {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
