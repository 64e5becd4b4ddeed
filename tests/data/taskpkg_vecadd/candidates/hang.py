"""Time Limit Exceeded: never returns."""
import time


def run_kernel(a, b, out, n):
    while True:
        time.sleep(0.05)
