"""Side-by-side benchmarks: tokworker and the reference libraries measured in the same run, as ratios."""
