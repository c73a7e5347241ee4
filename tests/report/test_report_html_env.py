"""The HTML report speaks as the CLI does: rates as 2.76 k/s, the environment in words,
the spans dropped while recording."""

from __future__ import annotations

import json
import platform
import re
import socket

import hotspan
from hotspan.report import html_report


def test_rates_environment_and_dropped(fresh):
    for _ in range(5):
        with hotspan.span("send", "comms", arg=1 << 20):
            sum(range(20_000))
    table = hotspan.drain()
    meta = dict(table.schema.metadata)
    meta[b"hotspan.dropped"] = json.dumps({"total": 25576, "threads": {}}).encode()
    page = html_report(table.replace_schema_metadata(meta))
    row = re.search(r"<tr><td>comms</td><td>send</td>(.*?)</tr>", page).group(1)
    cells = re.findall(r">([^<]*)</td>", row)
    assert re.fullmatch(r"\d+\.\d\d [kMG]/s", cells[-1]), cells  # arg/s as human_rate writes it
    assert "e+" not in row
    env = json.loads(meta[b"hotspan.env"])
    assert env["digest"] not in page  # no hash for a person to decode
    for word in (
        socket.gethostname(),
        platform.python_version(),
        hotspan.__version__,
        "capacity 1,024",
        "memory_cap 64.00 MiB",
        "25,576",
    ):
        assert word in page, word
