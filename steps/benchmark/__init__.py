"""The benchmark step: ``python -m steps.benchmark`` runs ``steps.benchmark.step``."""
