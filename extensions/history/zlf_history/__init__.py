"""zlf extension ``history``: results over time, change points, bisect, and a static dashboard."""
