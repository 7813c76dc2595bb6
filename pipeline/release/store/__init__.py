"""The release store's mechanics: files, locks, publishing, pointers, history, environment copies, checksums and
signatures. Nothing here decides whether a release may ship; :mod:`pipeline.release.evidence` does."""
