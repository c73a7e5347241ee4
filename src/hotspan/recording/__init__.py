"""Recording to destinations while a program runs: ``record()`` (a file, a dataset
directory, a collector), the Arrow Flight collector, the live log and subscribers, each
with its own cursor (the hub).

    with hotspan.record("run/"): ...        # hotspan.recording.recorder
    with hotspan.live(min_ns=10**6): ...     # hotspan.recording.live_log
    hotspan collect --out run/               # hotspan.recording._collector
    with hotspan.subscribe(callback): ...    # hotspan.recording.subscribers
                                             # hotspan.recording._hub: every reader's cursor
"""

__all__: list[str] = []  # a namespace: its modules are what it offers
