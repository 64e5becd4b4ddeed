"""zlf extension ``maca``: MetaX GPUs, which mcPytorch exposes as ``torch.cuda``."""
