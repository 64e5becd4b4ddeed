"""zlf extension ``profile``: hardware counters of a point's kernels (``zlf profile``) and a
triage bundle per decided point of an A/B campaign (``zlf triage``, ``zlf ab --triage``)."""
