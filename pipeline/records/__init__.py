"""Typed records of the files stages hand to each other: one module per file, each with a schema version and one
``to_json``/``from_json``. Every reader of such a file goes through its record; records import only pipeline.core."""
