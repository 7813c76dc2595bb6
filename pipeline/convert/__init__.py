"""Model conversion: export (PyTorch or a given ONNX), onnxsim simplification, FP16 with a data-driven safety analysis."""
