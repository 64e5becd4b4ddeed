"""This repository's own test sessions (not part of any distribution): the development plugin
``tests/_devtools/zlf_devsession.py`` makes them fast (OpenMP threads per xdist worker, a shared
bytecode cache, a spawn server for the processes tests start). zlf's installed pytest plugin,
``zlf.testing``, only offers fixtures; a user's session where zlf is installed runs as it would
without it: the ``gpu`` and ``slow`` markers (pyproject.toml) and the skipping of ``gpu`` tests
without a CUDA device are this repository's, for core's tests and every extension's."""
from zlf.testing import skip_without_gpu

pytest_plugins = ["zlf_devsession"]


def pytest_collection_modifyitems(config, items):
    skip_without_gpu(items)
