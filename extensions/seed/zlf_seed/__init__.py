"""zlf extension ``seed``: deterministic inputs across processes."""
