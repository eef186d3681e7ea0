"""The change feed per kind (`MemoryStore.changes` with kinds) and the kept selections by
selector signature must give what the plain computations give: the whole feed filtered by
kind, and a fresh match of every object."""

from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.store import MemoryStore
from gpufleet.store.labels import matches, parse_selector
from gpufleet.store.port import EVENT, MODEL_REPLICA, NODE, POD, Expired, Kind

T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
KINDS = (MODEL_REPLICA, POD, EVENT, NODE)


def body(kind: Kind, name: str, labels: dict[str, str]) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": labels}
    if kind.namespaced:
        meta["namespace"] = "ml"
    return {"apiVersion": kind.api_version, "kind": kind.kind, "metadata": meta, "spec": {}}


_OP = st.tuples(
    st.sampled_from(KINDS),
    st.sampled_from(["a", "b", "c"]),
    st.sampled_from(["write", "status", "delete", "read", "compact"]),
    st.sampled_from(["x", "y"]),
)


@given(ops=st.lists(_OP, max_size=60), cursors=st.lists(st.integers(0, 70), max_size=8))
@settings(max_examples=150, deadline=None)
def test_changes_of_some_kinds_are_the_feed_filtered_by_kind(
    ops: list[tuple[Kind, str, str, str]], cursors: list[int]
) -> None:
    store = MemoryStore(clock=lambda: T0)
    compacted = 0
    for kind, name, op, label in ops:
        namespace = "ml" if kind.namespaced else None
        current = store.get(kind, name, namespace)
        if op == "compact":
            store.compact(store.revision // 2)
            compacted = max(compacted, store.revision // 2)
        elif op == "delete" and current is not None:
            store.delete(kind, name, namespace)
        elif op == "status" and current is not None:
            store.patch_status(kind, name, namespace, {"n": label})
        elif op == "write" and current is None:
            store.create(body(kind, name, {"c": label}))
        elif op == "write" and current is not None:
            current["metadata"]["labels"] = {"c": label}
            store.update(current)
        # Asked of five lists of kinds, before and after writes that changed nothing, some,
        # or every kind asked of.
        for asked in ([*KINDS, kind], KINDS, [kind], [kind, POD], (kind,)):
            assert store.kind_revisions(asked) == tuple(store.kind_revision(k) for k in asked)
        assert store.kind_revision(kind) == max(
            (c.cursor for c in store.changes(compacted, [kind])[0]),
            default=store.kind_revision(kind) if compacted else 0,
        )
        for cursor in cursors:
            if cursor < compacted:
                with pytest.raises(Expired):
                    store.changes(cursor, [kind])
                continue
            every, at = store.changes(cursor)
            for wanted in ([kind], [kind, POD], list(KINDS), [kind, kind], []):
                found, found_at = store.changes(cursor, wanted)
                assert found_at == at
                assert found == [c for c in every if c.kind in wanted]


def test_a_mapping_selector_selects_like_its_text_across_writes() -> None:
    """A selection kept by the mapping's pairs follows relabels and deletes as the text's."""
    store = MemoryStore(clock=lambda: T0)
    for i in range(6):
        store.create(body(POD, f"p{i}", {"c": "xy"[i % 2], "t": "1"}))
    for step in range(12):
        name = f"p{step % 6}"
        if step % 4 == 3:
            store.delete(POD, name, "ml")
            store.create(body(POD, name, {"c": "y"}))
        else:
            current = store.get(POD, name, "ml")
            assert current is not None
            current["metadata"]["labels"] = {"c": "xy"[step % 2], "t": "1"}
            store.update(current)
        every = store.list(POD, "ml")
        for text, mapping in (("c=x", {"c": "x"}), ("c=y,t=1", {"t": "1", "c": "y"})):
            want = [o for o in every if matches(parse_selector(text), o["metadata"]["labels"])]
            assert list(store.view(POD, "ml", mapping)) == want
            assert list(store.view(POD, None, mapping)) == want
            assert list(store.view(POD, "ml", text)) == want
