"""Right output, but it adds into its input a (inputs must stay read-only)."""


def run_kernel(a, b, out, n):
    a.add_(b)
    out.copy_(a)
