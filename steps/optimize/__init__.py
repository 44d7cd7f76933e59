"""The optimize step: ``python -m steps.optimize`` runs ``steps.optimize.step``."""
