"""Helpers shared by the tests (and by bench/crash_matrix.py, the crash matrix's command
line): nothing here imports bench/."""
