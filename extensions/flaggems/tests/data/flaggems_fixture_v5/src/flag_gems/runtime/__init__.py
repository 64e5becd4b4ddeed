import types

import torch

device = types.SimpleNamespace(name="cpu", vendor_name="fixture")
torch_device_fn = types.SimpleNamespace(synchronize=lambda *a: None, empty_cache=lambda: None)
torch_backend_device = types.SimpleNamespace(matmul=types.SimpleNamespace(allow_tf32=False))
