"""`moved_keys`, the diff of two listings the agent's passes share, against its definition."""

from hypothesis import given
from hypothesis import strategies as st

from gpufleet.agent.model import moved_keys

_listing = st.dictionaries(
    st.sampled_from("abcdef"), st.one_of(st.none(), st.sampled_from(["1", "2", "3"]))
).flatmap(lambda d: st.permutations(list(d.items())))


@given(_listing, _listing, st.booleans())
def test_moved_keys_are_those_that_came_went_or_moved(
    now: list[tuple[str, str | None]], before: list[tuple[str, str | None]], same_keys: bool
) -> None:
    if same_keys:  # the common case: the same keys in the same order, versions apart
        before = [(k, v) for (k, _), (_, v) in zip(now, [*before, *now], strict=False)]
    keys, versions = [k for k, _ in now], [v for _, v in now]
    last_keys, last_versions = [k for k, _ in before], [v for _, v in before]
    was, are = dict(before), dict(now)
    want = {k for k in was.keys() | are.keys() if was.get(k, "gone") != are.get(k, "gone")}
    want |= {k for k, v in are.items() if v is None}
    assert moved_keys(keys, versions, last_keys, last_versions) == want
