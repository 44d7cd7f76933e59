"""Reviewing local runs as the argo CLI and UI show cluster runs: ``list``, ``get``,
``logs``, a page per run (``runs/<name>/index.html``) and ``ui``, which serves them."""

# the verbs of ``python flows/cifar.py`` that review runs (commands.py); here, where the
# command line reads them without loading the rest
VERBS = ("list", "get", "logs", "ui")
