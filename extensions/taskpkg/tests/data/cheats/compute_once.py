"""Class 7, compute once, copy forever: the first answer is remembered and copied into every
later output, whatever the inputs. Caught only if the judge's input sets differ. Honest twin:
always computes."""
from _cheat import honest, work

_first = []


def run_kernel(a, b, out, n):
    if not honest() and _first:
        out.copy_(_first[0])
        return
    work(a, b, out)
    _first.append(out.clone())
