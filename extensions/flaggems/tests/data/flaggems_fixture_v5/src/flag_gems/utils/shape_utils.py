def size_in_bytes(t):
    return t.numel() * t.element_size()
