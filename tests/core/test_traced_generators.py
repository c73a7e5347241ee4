"""@traced on generators and async generators: one span per step of the iteration."""

from __future__ import annotations

import asyncio
import time

import pytest

import hotspan


def spans(name):
    return [r for r in hotspan.drain().to_pylist() if r["name"] == name]


def test_generator_steps_are_spans_and_the_consumer_is_not_counted(fresh):
    @hotspan.traced
    def produce(n):
        for i in range(n):
            time.sleep(0.002)  # the generator's own work, per item
            yield i
        return "done"

    got = []
    for item in produce(3):
        got.append(item)
        time.sleep(0.02)  # the consumer's work: not the generator's
    assert got == [0, 1, 2]
    rows = [
        r
        for r in spans(
            "test_generator_steps_are_spans_and_the_consumer_is_not_counted.<locals>.produce"
        )
    ]
    assert len(rows) == 4  # three items, and the step that finishes it
    assert all(1_500_000 < r["duration_ns"] < 15_000_000 for r in rows[:3])
    assert not any(r["error"] for r in rows)


def test_generator_send_throw_close_and_return_value(fresh):
    @hotspan.traced("echo")
    def echo():
        total = 0
        try:
            while True:
                received = yield total
                total += received
        except KeyError:
            yield -1
        return total

    gen = echo()
    assert next(gen) == 0 and gen.send(5) == 5 and gen.send(2) == 7
    assert gen.throw(KeyError()) == -1
    with pytest.raises(StopIteration) as stop:
        next(gen)
    assert stop.value.value == 7
    assert len(spans("echo")) == 5

    gen = echo()
    next(gen)
    gen.close()
    assert len(spans("echo")) == 1


def test_generator_error_marks_the_step(fresh):
    @hotspan.traced("bad")
    def bad():
        yield 1
        raise ValueError("boom")

    with pytest.raises(ValueError):
        list(bad())
    assert [r["error"] for r in spans("bad")] == [False, True]


def test_async_generator_steps_are_spans(fresh):
    @hotspan.traced("ticks", "async")
    async def ticks(n):
        for i in range(n):
            await asyncio.sleep(0.002)
            yield i

    async def main():
        return [i async for i in ticks(3)]

    assert asyncio.run(main()) == [0, 1, 2]
    rows = spans("ticks")
    assert len(rows) == 4 and all(r["duration_ns"] > 1_500_000 for r in rows[:3])
    assert {r["category"] for r in rows} == {"async"}
