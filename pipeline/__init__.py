"""Model-artifact build pipeline for NVIDIA Triton."""

__version__ = "0.1.0"
