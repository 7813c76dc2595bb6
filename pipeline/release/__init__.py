"""Releases: immutable checksummed snapshots of the model repository, promoted and rolled back per environment."""
