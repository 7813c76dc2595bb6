"""This project's Hydra plugin: registers the schema's defaults (the ``schema`` configs conf/ composes over) and the
OmegaConf resolvers (``pipeline_checked``, ``pipeline_engine_precision``, ``pipeline_*in_fleet``), nothing else.

`dvc exp run -S ...` composes conf/ into params.yaml itself (dvc.utils.hydra.compose_and_dump) and never
calls our code, but it first loads the Hydra plugins found under ``hydra_plugins/`` on its plugins path
(the repository root by default). Importing this module stores every default of pipeline/core/config's schema in
Hydra's ConfigStore (so params.yaml holds every key) and registers the resolvers, so resolving
``config_check: ${pipeline_checked:}`` in conf/config.yaml runs every config check before DVC writes
params.yaml. ``hydra_plugins/`` itself has no ``__init__.py``: it is a namespace package Hydra scans.
"""

from pipeline.core.config.resolver import register

register()
