"""The stage_data step: ``python -m steps.stage_data`` runs ``steps.stage_data.step``."""
