"""zlf extension ``flaggems``: FlagGems benchmark ops, measured by zlf."""
