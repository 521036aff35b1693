"""Root conftest: lets pytest run the chapters' MyST notebooks under nbval (see bookkit/pytest_notebooks.py)."""

pytest_plugins = ["bookkit.pytest_notebooks"]
