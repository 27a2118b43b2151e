"""Benchmarks behind ``meshpar bench``: real workers, strategies side by side."""
