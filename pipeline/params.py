"""Compose conf/ into params.yaml, exactly as `dvc exp run` does.

DVC composes Hydra only on `dvc exp run` (hydra.enabled), never on `dvc repro`.
We commit the composed params.yaml so `dvc repro` on a fresh clone works, and
regenerate it with the *same* DVC function, so both paths give byte-identical
params (tests/core/test_config.py checks the committed file is current).
Both paths run every config check while composing (conf/config.yaml's ``config_check``
key, resolved by pipeline/core/config/resolver.py): a bad value fails here, with every
problem listed, and params.yaml keeps its old content.

    python -m pipeline.params                     # defaults
    python -m pipeline.params model=cnn targets='[cpu,a100]'
"""

from __future__ import annotations

import re
import signal
import sys
import tempfile
from pathlib import Path

from pipeline import exit_with
from pipeline.core.atomic import atomic_path
from pipeline.core.config import load_config
from pipeline.core.config.problems import did_you_mean
from pipeline.core.config.resolver import composing_in, register
from pipeline.core.config.store import schema_keys
from pipeline.core.errors import ConfigError, PipelineError, print_error

ROOT = Path(__file__).resolve().parent.parent


def _config_error(e: BaseException) -> ConfigError | None:
    """Our ConfigError behind an exception, if any: OmegaConf wraps what a resolver raises."""
    seen: set[int] = set()
    cur: BaseException | None = e
    while cur is not None and id(cur) not in seen:
        if isinstance(cur, ConfigError):
            return cur
        seen.add(id(cur))
        cur = cur.__cause__ or cur.__context__
    return None


def _unknown_override(e: BaseException) -> str | None:
    """The key of Hydra's "Could not override 'k'" (an override of a key the composed config does not have), or None."""
    m = re.match(r"Could not override '([^']+)'", str(e))
    return m.group(1) if m and "To append to your config use +" in str(e) else None


def _group_overrides(overrides: list[str], group: str) -> list[str]:
    return [o for o in overrides if o.lstrip("+~").split("=", 1)[0] == group]


def compose(overrides: list[str], conf_dir: Path = ROOT / "conf", config_name: str = "config") -> str:
    """Return the YAML text DVC's Hydra integration writes for these overrides.

    Raises ConfigError: Hydra cannot compose the overrides, or the composed config fails a check.
    """
    from dvc.utils.hydra import compose_and_dump  # the function `dvc exp run` calls
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    project = conf_dir.resolve().parent
    # `dvc exp run` finds the resolver through the Hydra plugin under <project>/hydra_plugins (DVC's default
    # plugins path is the repo root, passed the same way here). Hydra scans plugins once per process, so when
    # an earlier composition already did (tests), register the resolver directly as well.
    register()
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "params.yaml"
        try:
            with composing_in(project):
                compose_and_dump(out, str(conf_dir.resolve()), None, config_name, str(project), overrides)
        except (HydraException, OmegaConfBaseException, ValueError, OSError) as e:  # yaml errors are ValueErrors
            checked = _config_error(e)
            if checked is not None:
                raise checked from None
            unknown = _unknown_override(e)
            if unknown is not None:
                raise ConfigError(
                    f"unknown key '{unknown}'{did_you_mean(unknown, schema_keys(unknown))}",
                    fix="use a key the schema has (pipeline/core/config/schema*.py holds every key, its default and its range)",
                    details={"overrides": overrides},
                ) from None
            variant = _group_overrides(overrides, "variant")
            raise ConfigError(
                "Hydra could not compose conf/ with the given overrides",
                fix=(
                    f"{variant[0]}: both variants are always built; choose the served one with repository.default_variant=latency|throughput"
                    if variant
                    else "check the override names against conf/ (groups: model, export, precision, int8, target, variant, parity, choose, bench, release)"
                ),
                details={"overrides": overrides, "error": str(e).splitlines()[0]},
            ) from None
        return out.read_text(encoding="utf-8")


def write_params(overrides: list[str], out: Path = ROOT / "params.yaml", conf_dir: Path = ROOT / "conf") -> Path:
    """Compose (which checks every value), load the result as every stage will, then atomically replace ``out``."""
    text = compose(overrides, conf_dir)
    with atomic_path(out) as tmp:
        tmp.write_text(text, encoding="utf-8")
        load_config(tmp, origin=f"params composed from conf/ with overrides {overrides}")
    return out


def main(argv: list[str] | None = None) -> int:
    """CLI: ``python -m pipeline.params [hydra overrides...]``."""
    args = list(sys.argv[1:] if argv is None else argv)
    interrupted = []

    def on_sigint(signum: int, frame: object) -> None:
        interrupted.append(signum)
        raise KeyboardInterrupt

    # OmegaConf can turn a KeyboardInterrupt that lands while it parses YAML into another exception on its way
    # out; after a Ctrl-C, whatever ends the composition is the interrupt (params.yaml is written last, atomically).
    previous = signal.signal(signal.SIGINT, on_sigint)
    try:
        path = write_params(args)
    except Exception as e:
        if interrupted:
            raise KeyboardInterrupt from None
        if isinstance(e, PipelineError):
            return print_error(e, "params")
        raise
    finally:
        signal.signal(signal.SIGINT, previous)
    print(f"wrote {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}")
    return 0


if __name__ == "__main__":
    exit_with(main)
