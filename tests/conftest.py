"""Unit tests run with one BLAS/torch thread, like the notebooks: on 2 cores, with two pytest
workers, the default thread pools oversubscribe the machine and small solves slow down 10-100x."""

from companion_lib.common import limit_threads


def pytest_configure(config):
    limit_threads()
