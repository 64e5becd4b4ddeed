"""This repository's own test sessions (not part of any distribution): the development plugin
``tests/_devtools/zlf_devsession.py`` makes them fast (OpenMP threads per xdist worker, a shared
bytecode cache, a spawn server for the processes tests start). zlf's installed pytest plugin,
``zlf.testing``, only offers fixtures; a user's session where zlf is installed runs as it would
without it."""
pytest_plugins = ["zlf_devsession"]
