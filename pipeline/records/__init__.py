"""Typed records of the files that cross stages and commands: one module per file, each with a schema version and
one ``to_json`` / ``from_json``. Records import nothing from ``pipeline`` but ``pipeline.core``."""
