"""One thin entry point per DVC stage: parse the paths dvc.yaml gives, call the stage's package, write its outputs."""
