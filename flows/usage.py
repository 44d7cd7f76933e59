"""The command line's user error: options that do not go together, or a path that does
not hold what the option names. One line, exit 2 (``flows.cli.main``)."""


class UsageError(ValueError):
    """Options that do not go together, or a path that is not what they name."""
