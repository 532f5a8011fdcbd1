"""Side-by-side measurements of sweeper against plain Optuna on the same PostgreSQL.

``python -m benchmarks.run`` (``make bench``) runs every item of the benchmark issue and prints
a table with the targets; the figures are ratios, which hold on a noisy shared machine. Nothing
here is a timed test: the harness measures and reports, it never asserts about time.
"""
