"""Four ranks started with multiprocessing (spawn), one trace.

    python examples/multiprocess_spawn.py run/                      # ranks write run/rank=R/...
    hotspan collect --out run/ &  python examples/multiprocess_spawn.py grpc://127.0.0.1:8815
    hotspan stats run/ --by rank,name

Each rank records to the destination with hotspan.record(); the same works without any code
in the ranks by setting HOTSPAN_OUT=dest in the launcher's environment.
"""

from __future__ import annotations

import multiprocessing as mp
import sys
import time

import hotspan


def rank_main(rank: int, dest: str, steps: int) -> None:
    hotspan.configure(rank=rank)
    with hotspan.record(dest, flush_interval=0.5):
        for step in range(steps):
            with hotspan.span("step", "train", arg=step):
                with hotspan.span("forward", "compute"):
                    time.sleep(0.001 * (1 + rank))  # ranks of uneven speed
                with hotspan.span("allreduce", "comms", arg=1 << 20):
                    time.sleep(0.0005)


def main(argv: list[str]) -> int:
    dest = argv[0] if argv else "hotspan-run/"
    ranks = int(argv[1]) if len(argv) > 1 else 4
    steps = int(argv[2]) if len(argv) > 2 else 20
    ctx = mp.get_context("spawn")
    procs = [
        ctx.Process(target=rank_main, args=(rank, dest, steps), name=f"rank{rank}")
        for rank in range(ranks)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=120)
    failed = [p.name for p in procs if p.exitcode != 0]
    if failed:
        print(f"ranks failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    if "://" not in dest:
        table = hotspan.load(dest)
        print(
            f"{table.num_rows} spans from ranks {sorted(set(table.column('rank').to_pylist()))} in {dest}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
