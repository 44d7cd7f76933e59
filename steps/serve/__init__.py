"""The champion behind an HTTP endpoint: ``python -m steps.serve`` (the cifar-serve image's
command and the InferenceService's predictor)."""
