"""Device spans: time measured on an accelerator, turned into rows of the span table at drain.

``cuda``: ``hotspan.span(name, category, device="cuda")`` (CUDA event pairs recorded by the
C core through the CUDA driver; this module turns them into rows). Loaded by the first
drain after a device span; nothing here imports pyarrow at import.
"""

__all__: list[str] = []  # a namespace: its modules are what it offers
