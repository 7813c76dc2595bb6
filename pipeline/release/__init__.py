"""Releases: immutable checksummed snapshots of the model repository, promoted and rolled back per environment.

Sub-packages (each imports only the ones above it in this list):

- ``store/``: the store's mechanics, whatever the URL (local, ``s3://``, any fsspec filesystem): file access and
  atomic writes (``fs``, ``s3``), locks and leases (``lock``), publishing a release all-or-nothing (``publish``),
  the environment's pointer (``pointer``), its promotion history (``history``), the copy of a release into an
  environment (``env_copy``), the checksum check (``checksums``), signatures (``signing``), canary records
  (``canaries``), fault points for tests (``faults``), and :class:`~pipeline.release.store.store.ReleaseStore`.
- ``evidence/``: what a release is allowed to ship: the parity and bench reports bound to its files by sha256
  (``reports``), the DVC pipeline up to date (``dvc_check``), where it comes from (``provenance``), and the GTO
  tags in git that must agree with the store (``tags``).
- ``canary/``: ``release canary``: the refusals before anything loads (``prepare``), the run (``run``), its traffic
  (``traffic``), verdict and table (``report``), and the guard process that puts the servers back if it dies (``guard``).

The commands on top of them: ``build``, ``promote`` (promote and rollback), ``verify`` (verify and gc), ``listing``,
``archive`` (export and import), and ``triton_control``, the live reload of a running Triton that promote and the
canary share. The manifest and the canary record are typed records in :mod:`pipeline.records`.
"""
