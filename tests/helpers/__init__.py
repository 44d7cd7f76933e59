"""What the tests share besides fixtures (tests/conftest.py holds those): paths, the real
servers, the shared runs and builds, stand-ins, and the checks several test modules make.
Tests import these by name (``from tests.helpers.paths import REPO_ROOT``); no test module
imports another."""
