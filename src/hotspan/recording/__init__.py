"""Recording to destinations while a program runs: ``record()`` (a file, a dataset
directory, a collector), the Arrow Flight collector, and the live log.

    with hotspan.record("run/"): ...        # hotspan.recording.recorder
    with hotspan.live(min_ns=10**6): ...     # hotspan.recording.live_log
    hotspan collect --out run/               # hotspan.recording.collector
"""
