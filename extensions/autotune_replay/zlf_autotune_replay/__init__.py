"""zlf extension ``autotune_replay``: record Triton autotune choices, replay them exactly.

See docs/autotune.md. Modules: :mod:`.records` (the files), :mod:`.tuners` (the autotuner
patch), :mod:`.libtuner` (FlagGems' persistent tuner cache), :mod:`.plugin` (the hooks).
"""
