"""Benchmarks: scripts that print a table (``python benchmarks/<name>.py``); not shipped.
A script imports the project as installed (``pip install -e .``) and its siblings by their
names (``python benchmarks/x.py`` puts this folder first on sys.path); the tests import
them as ``benchmarks.x``. benchmarks/gpu.py and aoti_diagnose.py alone set a path up: they
run on a bare GPU machine, nothing installed."""
