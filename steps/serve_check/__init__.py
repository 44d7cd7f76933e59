"""The live check of the served champion: ``python -m steps.serve_check`` runs
``steps.serve_check.step``."""
