"""zlf extension ``ir_dump``: per-shape IR of the kernel variants actually launched."""
