"""What a release is allowed to ship: reports bound to its files by sha256, a DVC pipeline that is up to date, its
provenance, and GTO tags that agree with the store. Imports nothing from the store."""
