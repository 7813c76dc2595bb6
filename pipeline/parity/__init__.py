"""The numerical parity gate: Polygraphy comparisons of every artifact against the reference, the report and its one reader."""
