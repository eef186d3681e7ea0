"""The replica index of `FreeDeviceTable`: the pods by replica, the claims each replica's pods
use, the replicas (diffed by resourceVersion) and each one's observation (issue 24 section 3:
the third of the table's four collaborators)."""

from __future__ import annotations

import itertools
import operator
from collections.abc import Callable, Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import Any, Final

from gpufleet.agent.device_plugin import Holds
from gpufleet.agent.model import (
    Found,
    ObservationResult,
    ObservedReplica,
    Problems,
    RawObject,
    versions_of,
)
from gpufleet.agent.observe import read_replicas
from gpufleet.agent.pods import (
    PodInfo,
    Replica,
    count_pods,
    observed_replica,
    read_pod,
    read_replica,
)
from gpufleet.agent.table_claims import ClaimIndex
from gpufleet.agent.table_nodes import NodeInfos

_Key = tuple[str, str]
_NO_META: Final[Mapping[str, Any]] = MappingProxyType({})


class ReplicaIndex:
    """The pods and replicas the table holds, and the replicas' observations."""

    def __init__(
        self,
        nodes: NodeInfos,
        claims: ClaimIndex,
        holds: Holds,
        set_found: Callable[[tuple[str, object], tuple[Found, ...]], None],
    ) -> None:
        self._nodes = nodes
        self._claims = claims
        self._holds = holds
        self._set_found = set_found
        self._pods: dict[_Key, PodInfo] = {}
        self._replica_pods: dict[_Key, dict[_Key, PodInfo]] = {}
        self._claimed_by: dict[_Key, dict[_Key, int]] = {}
        self._replicas: dict[_Key, tuple[object, Replica]] = {}
        #: The pools the replicas name.
        self.pools: frozenset[str] = frozenset()
        #: The replicas to observe again.
        self.dirty: set[_Key] = set()
        self._results: dict[_Key, ObservedReplica] = {}
        #: The replicas' keys, sorted (None: to be sorted again).
        self._order: list[_Key] | None = None
        #: The replicas' resourceVersions by key, and in order, as last taken.
        self._versions: dict[_Key, object] = {}
        self._version_list: list[object] | None = None
        #: The keys of `_version_list`, in its order (empty while it is None).
        self._key_list: list[_Key] = []

    def pod_keys(self) -> list[_Key]:
        """The keys of the pods held."""
        return list(self._pods)

    def observed(self, key: _Key) -> ObservedReplica | None:
        """The replica's observation, as of the last `observe`."""
        return self._results.get(key)

    def recount_all(self) -> None:
        """Observe every replica again (a cordon moved)."""
        self.dirty.update(self._replicas)

    def apply_pods(self, pending: Mapping[_Key, RawObject | None]) -> None:
        """Take the pods' new versions (None: deleted)."""
        for key, obj in pending.items():
            info = read_pod(obj) if obj is not None else None
            before = self._pods.get(key)
            if info == before:
                continue
            if before is not None:
                self._file_pod(key, before, -1)
            if info is None:
                del self._pods[key]
            else:
                self._pods[key] = info
                self._file_pod(key, info, 1)

    def _file_pod(self, key: _Key, pod: PodInfo, by: int) -> None:
        if pod[1] is None:
            return
        ns = key[0]
        replica = (ns, pod[1])
        self.dirty.add(replica)
        pods = self._replica_pods.setdefault(replica, {})
        if by > 0:
            pods[key] = pod
        else:
            del pods[key]
            if not pods:
                del self._replica_pods[replica]
        for c in pod[5]:
            by_replica = self._claimed_by.setdefault((ns, c), {})
            _add(by_replica, replica, by)
            if not by_replica:
                del self._claimed_by[(ns, c)]

    def apply_replicas(self, objects: Sequence[RawObject]) -> bool:
        """Take the replicas, diffed with the last ones by key and resourceVersion (compared in
        C: a replica whose version is unchanged is not read); whether the set of replicas or
        the pools they name changed."""
        fast = versions_of(objects)
        last, self._version_list = self._version_list, fast
        if fast is not None and fast == last and None not in fast:
            return False  # the same replicas, at the same versions
        try:
            metas = list(map(_META, objects))
            keys = list(zip(map(_NAMESPACE, metas), map(_NAME, metas), strict=True))
        except (AttributeError, TypeError):  # not mappings: never from a store
            return self._read_replicas_whole(objects)
        if fast is not None and last is not None and None not in fast and keys == self._key_list:
            # The same keys in the same order (compared in C), as between most reads: the
            # replicas whose version moved are found pair by pair (in C too).
            moved = list(itertools.compress(range(len(keys)), map(operator.ne, fast, last)))
            by_key = {keys[i]: objects[i] for i in moved}
            self._versions.update((keys[i], fast[i]) for i in moved)
            return self._take_replicas(by_key.keys(), by_key)
        now = dict(zip(keys, map(_VERSION, metas), strict=True))
        if len(now) != len(objects) or any(k[1] in (None, "") or k[0] is None for k in keys):
            return self._read_replicas_whole(objects)  # never from a store either
        self._key_list = keys if fast is not None else []
        if now == self._versions and None not in now.values():
            return False
        changed = {key for key, _ in now.items() ^ self._versions.items()}
        changed.update(key for key, version in now.items() if version is None)
        self._versions = now
        return self._take_replicas(changed, dict(zip(now, objects, strict=True)))

    def _take_replicas(self, changed: Iterable[_Key], by_key: Mapping[_Key, RawObject]) -> bool:
        """Take the changed replicas (`by_key`: the objects read; a key not in it is gone);
        whether the set of replicas or the pools they name changed."""
        is_moved = False
        for key in changed:
            is_moved = self._take_replica(key, by_key.get(key)) or is_moved
        self._set_found(("replicas", ""), ())
        if is_moved:
            reads = self._replicas.values()
            self.pools = frozenset(p for _, rep in reads for p in rep.pools)
        return is_moved

    def _take_replica(self, key: _Key, obj: RawObject | None) -> bool:
        """Take the replica's new version (None: gone); whether the replicas or their pools
        changed. A version whose read is the same (a status write) changes nothing."""
        held = self._replicas.get(key)
        if obj is None:
            if held is not None:
                del self._replicas[key]
                self.dirty.add(key)
            return held is not None
        rep = read_replica(obj)
        version = _meta_field(obj, "resourceVersion")
        if held is not None and held[1] == rep:
            self._replicas[key] = (version, held[1])
            return False
        self._replicas[key] = (version, rep)
        self.dirty.add(key)
        return held is None or held[1].pools != rep.pools

    def _read_replicas_whole(self, objects: Sequence[RawObject]) -> bool:
        """Replicas with two of one key or without a name (never from a store): read as
        `observe` reads them, every one looked at again."""
        problems = Problems()
        reads, pools = read_replicas(objects, problems)
        self._version_list, self._key_list = None, []
        self.dirty.update(self._replicas.keys() | reads.keys())
        self._replicas = {key: (None, rep) for key, rep in reads.items()}
        self._versions = dict.fromkeys(reads)  # no version: every one is read again next time
        self.pools = pools
        self._set_found(("replicas", ""), tuple(problems.records()))
        return True

    def in_order(
        self, changed: frozenset[_Key], last: ObservationResult | None
    ) -> tuple[ObservedReplica, ...]:
        """Every replica's observation, sorted by key."""
        if last is not None and not changed:
            return last.replicas
        results = self._results
        if self._order is None:
            self._order = sorted(results)
        return tuple(map(results.__getitem__, self._order))

    def observe(self) -> frozenset[_Key]:
        """Observe the replicas to look at again; the keys whose observation changed."""
        dirty = self.dirty
        if self._nodes.membership_moved:
            dirty.update(self._replicas)  # a pod's pool may come from its node's
        for claim in self._claims.times_moved:
            dirty.update(self._claimed_by.get(claim, ()))
        changed: set[_Key] = set()
        results = self._results
        pseudo = self._holds.allocated  # device-plugin pods' pseudo claims
        allocated = (
            {**self._claims.allocated, **pseudo} if pseudo and dirty else self._claims.allocated
        )
        for key in dirty:
            held = self._replicas.get(key)
            if held is None:
                if results.pop(key, None) is not None:
                    changed.add(key)
                    self._order = None
                continue
            if key not in results:
                self._order = None
            rep = held[1].fresh()
            pods = self._replica_pods.get(key, {}).values()
            count_pods(rep, pods, allocated, self._nodes.node_pool, self._nodes.cordoned)
            observed = observed_replica(rep)
            if results.get(key) != observed:
                results[key] = observed
                changed.add(key)
        dirty.clear()
        return frozenset(changed)


_META: Final = operator.methodcaller("get", "metadata", _NO_META)
_NAMESPACE: Final = operator.methodcaller("get", "namespace")
_NAME: Final = operator.methodcaller("get", "name")
_VERSION: Final = operator.methodcaller("get", "resourceVersion")


def _meta_field(obj: RawObject, field_name: str) -> Any:
    meta = obj.get("metadata")
    return meta.get(field_name) if isinstance(meta, Mapping) else None


def _add(counts: dict[Any, int], key: Any, by: int) -> None:
    n = counts.get(key, 0) + by
    if n:
        counts[key] = n
    else:
        counts.pop(key, None)
