"""``python -m steps.config``: validate and print a config, or describe every field."""

from steps.common.config.loader import main

if __name__ == "__main__":
    raise SystemExit(main())
