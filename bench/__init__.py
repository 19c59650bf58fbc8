"""Benchmarks (run as scripts: python bench/NAME.py); a package so they can share helpers."""
