"""Stand-ins for modules that cannot be installed on CPU machines (named as such)."""
