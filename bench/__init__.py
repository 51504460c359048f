"""Benchmark scripts that print figures (not tests): see bench/README.md."""
