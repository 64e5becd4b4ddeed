"""zlf extension ``cudagraph``: time points by graph replay; fall back per point, marked."""
