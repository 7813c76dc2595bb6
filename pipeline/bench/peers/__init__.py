"""The side by side (bench.peers): the same model, inputs and load through TorchServe beside Triton."""
