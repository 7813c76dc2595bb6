"""Which precision the ONNX Runtime model serves: configured, or for ``auto`` the fastest that passed parity,
timed in process with the bench's paired rounds and interval (timing.py), decided per variant (decide.py)."""
