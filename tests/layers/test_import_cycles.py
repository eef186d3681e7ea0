"""No import circle in `src/`: the module graph (every import, those behind `TYPE_CHECKING`
and inside functions too) has no cycle.

import-linter's contracts (`make layers`) fix the direction between packages; a circle inside
one package (issue 24: sim/emulated/autoscaler.py and cluster.py imported each other) passes
them, so this test walks the whole graph. A circle is reported with its modules in order.
"""

import grimp

#: Circles known today, outside the simulator's area, each with who removes it. The list may
#: only shrink: a listed circle that is gone fails `test_known_circles_still_exist` until its
#: entry goes too.
KNOWN_CIRCLES: list[list[str]] = [
    # Behind TYPE_CHECKING: pod_security types `ClusterPolicy` from policy, which imports its
    # checks. Issue 24 (the agent's part): move `ClusterPolicy` to a module of its own.
    ["gpufleet.agent.pod_security", "gpufleet.agent.policy"],
]


def src_circles() -> list[list[str]]:
    graph = grimp.build_graph("gpufleet", exclude_type_checking_imports=False)
    edges = {m: set(graph.find_modules_directly_imported_by(m)) for m in graph.modules}
    return strongly_connected(edges)


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components with more than one module (iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component: list[str] = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_strongly_connected_finds_a_circle_and_only_it() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert strongly_connected(graph) == [["a", "b", "c"]]


def test_src_has_no_import_circle() -> None:
    circles = [c for c in src_circles() if c not in KNOWN_CIRCLES]
    assert circles == [], "import circles (each a set of modules importing each other): " + (
        "; ".join(" <-> ".join(c) for c in circles)
    )


def test_known_circles_still_exist() -> None:
    gone = [c for c in KNOWN_CIRCLES if c not in src_circles()]
    assert gone == [], f"no longer circles, take them off KNOWN_CIRCLES: {gone}"
