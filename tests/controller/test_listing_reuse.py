"""Reading a listing again from the last one (`_reread`, `_aligned`) gives what reading every
object afresh gives, however the listing changed: objects changed in place, added, deleted,
or moved, and over many steps (so that spans found again, moved and cut keep covering the
listing in order)."""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pytest

from gpufleet.controller.loop import _RUN_LENGTH, _aligned, _Listing, _reread

Hit = tuple[Mapping[str, Any], int]


@dataclass(slots=True)
class Span:
    lo: int
    hi: int

    def moved(self, lo: int) -> Span:
        return Span(lo, lo + self.hi - self.lo)


class Reader:
    """Reads an object as its `n`, and counts the objects it read (not found in `last`)."""

    def __init__(self) -> None:
        self.reads = 0

    def __call__(
        self,
        objs: Sequence[Mapping[str, Any]],
        lo: int,
        hi: int,
        last: Mapping[int, Hit],
        hits: list[Hit],
        spans: list[Span],
    ) -> None:
        for start in range(lo, hi, _RUN_LENGTH):
            end = min(start + _RUN_LENGTH, hi)
            for obj in objs[start:end]:
                hit = last.get(id(obj))
                if hit is None or hit[0] is not obj:
                    self.reads += 1
                    hit = (obj, obj["n"])
                hits.append(hit)
            spans.append(Span(start, end))


def _obj(n: int) -> dict[str, Any]:
    return {"n": n}


def _changed(objs: list[dict[str, Any]], rng: random.Random, counter: list[int]) -> None:
    for _ in range(rng.randint(0, 4)):
        what = rng.choice(["change", "add", "delete", "move"])
        counter[0] += 1
        if what == "add" or not objs:
            objs.insert(rng.randint(0, len(objs)), _obj(counter[0]))
        elif what == "change":
            objs[rng.randrange(len(objs))] = _obj(counter[0])
        elif what == "delete":
            del objs[rng.randrange(len(objs))]
        else:
            objs.insert(rng.randint(0, len(objs) - 1), objs.pop(rng.randrange(len(objs))))


def _check(listing: _Listing[Any, Span], objs: Sequence[Mapping[str, Any]]) -> None:
    assert listing.objs == tuple(objs)
    assert [h[0] for h in listing.hits] == list(objs)
    assert [h[1] for h in listing.hits] == [o["n"] for o in objs]
    at = 0
    for span in listing.spans:
        assert span.lo == at < span.hi
        at = span.hi
    assert at == len(objs)


@pytest.mark.parametrize("seed", range(20))
def test_a_listing_read_again_is_what_reading_it_afresh_gives(seed: int) -> None:
    rng = random.Random(seed)
    objs = [_obj(n) for n in range(200)]
    counter = [len(objs)]
    reader = Reader()
    listing: _Listing[Any, Span] = _reread(objs, None, reader)
    for _ in range(200):
        _changed(objs, rng, counter)
        listing = _reread(objs, listing, reader)
        _check(listing, objs)
    # What changed is read again, not the listing: 200 steps of at most 4 changes each
    # read far fewer objects than 200 listings of about 200.
    assert reader.reads < 200 * 200 // 4


def test_an_object_added_shifts_the_spans_after_it_without_reading_them() -> None:
    objs = [_obj(n) for n in range(64)]
    reader = Reader()
    listing: _Listing[Any, Span] = _reread(objs, None, reader)
    reader.reads = 0
    objs.insert(40, _obj(100))
    listing = _reread(objs, listing, reader)
    _check(listing, objs)
    assert reader.reads == 1
    segments = _aligned(listing.objs, listing.objs, listing.spans)
    assert all(span is not None for _, _, span in segments)
