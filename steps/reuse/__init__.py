"""The check of a memo hit before the pipeline builds on it: ``python -m steps.reuse`` runs
``steps.reuse.step``; ``steps.reuse.record`` writes the reuse into this run's MLflow run."""
