"""The Triton model repository: configs rendered from Triton's model_config.proto and the repository writer."""
