"""A bench result as people read it: report.md, bench.png, peers.png, curves, the console line. Rendering only."""
