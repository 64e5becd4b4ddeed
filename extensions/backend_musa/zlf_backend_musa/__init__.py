"""zlf extension ``musa``: Moore Threads GPUs through torch_musa (``torch.musa``)."""
