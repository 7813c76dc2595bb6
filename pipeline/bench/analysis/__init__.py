"""What the measurements say: the headline ratios and the diagnosis rules (each finding names its fix)."""
