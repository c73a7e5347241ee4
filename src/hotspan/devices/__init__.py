"""Device spans: time measured on an accelerator, turned into rows of the span table at drain.

``cuda``: ``hotspan.span(name, category, device="cuda")`` (CUDA event pairs through torch).
Loaded on the first device span; nothing here imports pyarrow at import.
"""
