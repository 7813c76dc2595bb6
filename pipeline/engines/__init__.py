"""TensorRT engines per GPU target: machine probe, targets and profiles, the build, manifests, assembly into cc_model_filenames, CI helpers."""
