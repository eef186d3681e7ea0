"""`Generations`: what a call may find of what the calls before it stored."""

from __future__ import annotations

from gpufleet.core.memo import Generations


def test_carry_finds_only_what_the_previous_call_used_and_moves_it() -> None:
    memo: Generations[str, int] = Generations()
    memo.put("a", 1)
    memo.put("b", 2)
    memo.advance()
    assert memo.carry("a") == 1  # the previous call stored it
    assert memo.carry("a") is None  # this call has it now: `get` answers
    assert memo.get("a") == 1
    memo.put("c", 3)
    assert memo.carry("c") is None  # stored by this call, not carried
    memo.advance()
    # "b" was not used by the previous call: gone; "a" and "c" were.
    assert (memo.carry("a"), memo.carry("b"), memo.carry("c")) == (1, None, 3)
    memo.advance()
    memo.advance()
    assert len(memo) == 0


def test_an_entry_used_in_each_call_stays_and_one_left_alone_goes_after_two() -> None:
    memo: Generations[tuple[str, int], str] = Generations()
    memo.put(("signed", 1), "x")
    memo.put(("signed", 2), "y")
    memo.advance()
    assert memo.carry(("signed", 1)) == "x"
    memo.advance()
    # Carried into the last call: still there for this one; the other was used by neither.
    assert memo.get(("signed", 1)) == "x"
    assert memo.get(("signed", 2)) is None
