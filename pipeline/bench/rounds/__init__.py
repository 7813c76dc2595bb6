"""The headline rounds: each ratio from measurements taken next to each other, rounds until the intervals are narrow."""
