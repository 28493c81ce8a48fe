"""Benchmarks: each prints a table and writes its section of BENCHMARKS.md."""
