"""zlf extension ``shapes``: FlagGems-format shape files."""
