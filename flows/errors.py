"""The errors ``python flows/cifar.py`` turns into one line (flows/cli/main.py), one per
kind of fix: the config or a parameter (``FlowError``, exit 2), the command line's options
(``UsageError``, exit 2), the Argo server (``SubmitError``, exit 1). The local runner's own
errors, about the workflow it runs, are flows/local/errors.py's."""


class FlowError(ValueError):
    """The config cannot become a valid workflow; the message names the field and the fix."""


class UsageError(ValueError):
    """Options that do not go together, or a path that is not what they name."""


class SubmitError(RuntimeError):
    """The Argo server refused or could not be reached; the message is one line."""
