"""zlf extension ``foo``: an example backend to copy."""
