"""The train step: ``python -m steps.train`` runs ``steps.train.step``."""
