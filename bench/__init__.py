"""Benchmarks: scripts that print figures and ratios measured in one run."""
