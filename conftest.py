"""Root conftest: lets pytest run the chapters' MyST notebooks under nbval (see tests/notebook_plugin.py)."""

pytest_plugins = ["tests.notebook_plugin"]
