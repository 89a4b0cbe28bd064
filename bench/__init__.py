"""Benchmarks: `make bench` runs every bench_*.py here; each prints ratios against a named peer."""
