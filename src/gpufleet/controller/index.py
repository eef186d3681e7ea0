"""`HubIndex`: the controller's copy of the hub, fed by the change feed (a client-go informer and
lister in one), with every object parsed once.

Model.
- The index watches six kinds (`WATCHED`). The first `sync` (and any after `Expired`) takes
  the feed's newest cursor, then lists every kind (`Store.view`): every key is new. Every
  later `sync` reads `Store.changes(cursor, WATCHED)` and applies each change in order: the
  index then mirrors what the store's view shows, and `sync` returns the keys that changed.
- The assume ledger sits on top of the mirror (`overlay`): the controller's own writes the
  feed does not show yet replace, add or hide objects in the *effective* tables the step reads.
  The step also puts the objects its status patches return in place (`put_written`), so the
  same version arriving later through the feed is no change.
- Each effective object is parsed once per version into what the step needs of it (`Record`):
  classes, clusters and replicas by (uid, resourceVersion), where a cluster or replica version
  that differs from the last read one only in its status (the controller's own status
  writes) validates only its status and metadata (`parse_status_change`), and a replica's
  (`status_change`) converts only its status for the core (`replica_status_from_status`);
  a replica's record keeps the core's Replica and its body, no validated model;
  deployments by (uid, generation) and the metadata the check reads (a status write does not
  check a deployment again); observations by (uid, resourceVersion), where a version that differs
  from the last only in `status.observedAt` (a heartbeat) keeps the last report at the new time.

Invariant (tests/controller/test_index.py): after any sequence of changes the effective tables
and records equal those of an index built fresh from one listing of the same store.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final, cast

from gpufleet.api import (
    FieldError,
    ModelDeployment,
    ModelReplica,
    ValidationFailed,
    deployment_from_manifest,
    parse_object,
    parse_status_change,
    replica_from_manifest,
    replica_status_from_status,
    status_change,
    validate,
)
from gpufleet.api.replica_models import ModelReplicaStatus
from gpufleet.api.times import parse_time
from gpufleet.cel import CelCompileError
from gpufleet.controller.conditions import ReadObj
from gpufleet.controller.config import OBSERVATION_NAMESPACE_PREFIX
from gpufleet.controller.ledger import AssumeLedger, is_newer_or_same
from gpufleet.controller.status import AgentReport, parse_report
from gpufleet.core.model import Deployment, Replica
from gpufleet.store import ChangeType, Expired, Kind, Store
from gpufleet.store.port import (
    INFERENCE_CLASS,
    INFERENCE_CLUSTER,
    LATEST,
    MODEL_DEPLOYMENT,
    MODEL_REPLICA,
    POOL_OBSERVATION,
    REPLICA_OBSERVATION,
)

#: (namespace, "" for a cluster-scoped object; name)
Key = tuple[str, str]

WATCHED: Final = (
    INFERENCE_CLASS,
    INFERENCE_CLUSTER,
    MODEL_DEPLOYMENT,
    MODEL_REPLICA,
    POOL_OBSERVATION,
    REPLICA_OBSERVATION,
)
#: The kinds the controller writes, which the assume ledger overlays.
ASSUMED: Final = (INFERENCE_CLUSTER, MODEL_DEPLOYMENT, MODEL_REPLICA)


def key_of(obj: Mapping[str, Any]) -> Key:
    meta = obj["metadata"]
    return (meta.get("namespace") or "", str(meta["name"]))


def name_of(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    namespace = meta.get("namespace")
    return f"{namespace}/{meta.get('name')}" if namespace else str(meta.get("name"))


def version_of(obj: Mapping[str, Any] | None) -> str | None:
    return None if obj is None else (obj.get("metadata") or {}).get("resourceVersion")


def is_deleting(obj: Mapping[str, Any]) -> bool:
    return bool((obj.get("metadata") or {}).get("deletionTimestamp"))


# --- what the step reads of each kind -----------------------------------------------------


def check_deployment(obj: ReadObj) -> Deployment | list[FieldError]:
    """The deployment as the core reads it, or every error that stops it being read.

    Only the spec is validated: the status is the controller's own to rewrite.
    """
    body = {k: v for k, v in obj.items() if k != "status"}
    try:
        parsed = validate(body)
    except ValidationFailed as e:
        return list(e.errors)
    if not isinstance(parsed, ModelDeployment):
        return [FieldError("kind", "must be ModelDeployment")]
    try:
        return deployment_from_manifest(parsed)
    except CelCompileError as e:
        return [FieldError("spec.template.spec.engines.members.nodeSelector", e.message)]


def read_replica(obj: ReadObj) -> tuple[Replica | None, str]:
    """A replica object as scheduling reads it, and the error that keeps it from being read."""
    return _read_replica_core(obj, None, ())


def _read_replica_core(
    obj: ReadObj, last: tuple[ReadObj, Replica] | None, signature: tuple[object, ...]
) -> tuple[Replica | None, str]:
    """`read_replica` signed with `signature`. After a status write to `last` (its body and
    core Replica) only the status and metadata are validated again (`status_change`), and
    only the status is converted again: the rest of the core Replica is read from the spec
    and metadata, which it did not change. No validated model is kept: the core's value and
    the body are all a status write needs."""
    try:
        known = status_change(ModelReplica, last[0], obj) if last is not None else None
        if known is not None and last is not None:
            status = replica_status_from_status(cast(ModelReplicaStatus, known))
            return dataclasses.replace(last[1], status=status, signature=signature), ""
        replica = parse_object(obj)
        if not isinstance(replica, ModelReplica):
            return None, ""
        core = replica_from_manifest(replica)
        return (dataclasses.replace(core, signature=signature) if signature else core), ""
    except (ValidationFailed, ValueError, CelCompileError) as e:
        return None, f"ModelReplica {name_of(obj)}: {e}"


def read_object(obj: ReadObj) -> tuple[object, str]:
    """A class or cluster, parsed (None with the error when it does not validate)."""
    try:
        return parse_object(obj), ""
    except ValidationFailed as e:
        return None, str(e)


@dataclass(frozen=True, slots=True)
class Observation:
    """An observation object as trust reads it: the cluster it is about (None: not in an
    observation namespace), its report (None without a status, or with an error) and the
    error that keeps it from being read ("")."""

    cluster: str | None
    report: AgentReport | None
    error: str
    #: The replica a ReplicaObservation names, (namespace, name); None otherwise.
    replica: Key | None


def _is_heartbeat(old: ReadObj, new: ReadObj) -> bool:
    """Whether `new` is `old` with nothing changed but `status.observedAt` (and the version)."""
    old_meta, new_meta = old.get("metadata") or {}, new.get("metadata") or {}
    old_status, new_status = old.get("status") or {}, new.get("status") or {}
    return (
        old.get("apiVersion") == new.get("apiVersion")
        and old.get("spec") == new.get("spec")
        and old_meta.get("labels") == new_meta.get("labels")
        and old_meta.get("annotations") == new_meta.get("annotations")
        and old_meta.get("deletionTimestamp") == new_meta.get("deletionTimestamp")
        and old_status.keys() == new_status.keys()
        # (Compared as whole dicts, at C speed: the stamps set alike on both sides.)
        and {**old_status, "observedAt": None} == {**new_status, "observedAt": None}
    )


def _strict_time(value: object) -> datetime | None:
    """An RFC 3339 time with its offset (as the API accepts it); None otherwise."""
    if not isinstance(value, str) or len(value) < 20 or value[10] != "T":
        return None
    return parse_time(value, offset_required=True)


def read_observation(obj: ReadObj, last: tuple[ReadObj, Observation] | None) -> Observation:
    """`obj` as trust reads it; `last` (the previous version and what was read of it) is
    reused for a heartbeat: its report at the new time, without validating again."""
    namespace = (obj.get("metadata") or {}).get("namespace") or ""
    if not namespace.startswith(OBSERVATION_NAMESPACE_PREFIX):
        return Observation(None, None, "", None)
    cluster = namespace.removeprefix(OBSERVATION_NAMESPACE_PREFIX)
    spec = obj.get("spec") or {}
    replica: Key | None = None
    if obj.get("kind") == REPLICA_OBSERVATION.kind:
        ns, name = spec.get("replicaNamespace"), spec.get("replicaName")
        if isinstance(ns, str) and isinstance(name, str):
            replica = (ns, name)
    if spec.get("clusterName") != cluster:
        error = f"{obj['kind']} {name_of(obj)}: spec.clusterName is not {cluster}"
        return Observation(cluster, None, error, replica)
    if last is not None and last[1].report is not None and _is_heartbeat(last[0], obj):
        at = _strict_time(obj["status"]["observedAt"])
        if at is not None:
            was = last[1].report
            report = AgentReport(
                was.kind,
                was.name,
                was.namespace,
                was.identity,
                was.lease_epoch,
                at,
                obj,
                was.lease_uid,
            )
            return Observation(cluster, report, "", replica)
    try:
        return Observation(cluster, parse_report(obj), "", replica)
    except ValueError as e:
        return Observation(cluster, None, f"{obj['kind']} {name_of(obj)} is invalid: {e}", replica)


def _deployment_signature(obj: ReadObj) -> tuple[object, ...]:
    """What `check_deployment` reads besides the spec, whose changes move `generation`."""
    meta = obj["metadata"]
    return (
        meta.get("uid"),
        meta.get("generation"),
        obj.get("apiVersion"),
        obj.get("kind"),
        meta.get("labels"),
        meta.get("annotations"),
        meta.get("deletionTimestamp"),
    )


def _version_signature(obj: ReadObj) -> tuple[object, ...]:
    meta = obj["metadata"]
    return (meta.get("uid"), meta.get("resourceVersion"))


class Record:
    """An effective object and what was read of it (`parsed`, read on first use), for the
    signature `signature`. Never changed once read."""

    __slots__ = ("_last", "_parsed", "_read", "_reads", "obj", "signature")

    def __init__(
        self,
        obj: ReadObj,
        signature: tuple[object, ...],
        read: Callable[[ReadObj, Record | None], object],
        last: Record | None,
        reads: list[int],
    ) -> None:
        self.obj = obj
        self.signature = signature
        self._read: Callable[[ReadObj, Record | None], object] | None = read
        self._last = last
        self._parsed: Any = None
        self._reads = reads

    @classmethod
    def kept(cls, obj: ReadObj, last: Record) -> Record:
        """`obj` at `last`'s signature: what was read of `last` holds for it."""
        record = cls(obj, last.signature, _read_nothing, None, last._reads)
        record._read, record._parsed = None, last.parsed
        return record

    @property
    def parsed(self) -> Any:
        read = self._read
        if read is not None:
            last = self._last
            self._parsed = read(self.obj, last)
            self._read = self._last = None
            self._reads[0] += 1
        return self._parsed


def _is_read(record: Record | None) -> bool:
    """Whether `record` was read (so it holds no older record)."""
    return record is not None and record._read is None


def _read_nothing(obj: ReadObj, last: Record | None) -> object:
    return None


def _read_class_or_cluster(obj: ReadObj, last: Record | None) -> object:
    """`read_object`; a status write after a version that parsed validates only its status
    and metadata (`parse_status_change`: a cluster's status moves every publish)."""
    if last is not None:
        parsed, _ = last.parsed
        if parsed is not None:
            kept = parse_status_change(last.obj, parsed, obj)
            if kept is not None:
                return kept, ""
    return read_object(obj)


def _frozen(value: object) -> object:
    return tuple(sorted(value.items())) if isinstance(value, Mapping) else value


def _read_deployment(obj: ReadObj, last: Record | None) -> object:
    """`check_deployment`, the core's Deployment signed with what it was read from (uid,
    generation and the metadata the check reads), for the core's reuse across calls."""
    checked = check_deployment(obj)
    if not isinstance(checked, Deployment):
        return checked
    signature = tuple(_frozen(v) for v in _deployment_signature(obj))
    return dataclasses.replace(checked, signature=signature)


def _read_replica(obj: ReadObj, last: Record | None) -> object:
    """`read_replica`, the core's Replica signed with (uid, resourceVersion) (the next
    version's status write validates and converts only what it changed)."""
    known = None
    if last is not None:
        core, _ = last.parsed
        if core is not None:
            known = (last.obj, core)
    return _read_replica_core(obj, known, _version_signature(obj))


def _read_observation(obj: ReadObj, last: Record | None) -> object:
    return read_observation(obj, (last.obj, last.parsed) if last is not None else None)


#: How a kind's read uses the last record (`HubIndex.put`): not at all; when the last record
#: was read (a status write validates only what it changed, `parse_status_change`); always
#: (an observation's heartbeat keeps the last report: the last is read now, not kept alive).
_NO_LAST: Final = 0
_LAST_IF_READ: Final = 1
_LAST: Final = 2

#: Per kind: the signature a parse is kept by, the parse (given the last record), and how it
#: uses the last record.
_READERS: Final[
    dict[
        Kind,
        tuple[
            Callable[[ReadObj], tuple[object, ...]],
            Callable[[ReadObj, Record | None], object],
            int,
        ],
    ]
] = {
    INFERENCE_CLASS: (_version_signature, _read_class_or_cluster, _NO_LAST),
    INFERENCE_CLUSTER: (_version_signature, _read_class_or_cluster, _LAST_IF_READ),
    MODEL_DEPLOYMENT: (_deployment_signature, _read_deployment, _NO_LAST),
    MODEL_REPLICA: (_version_signature, _read_replica, _LAST_IF_READ),
    POOL_OBSERVATION: (_version_signature, _read_observation, _LAST),
    REPLICA_OBSERVATION: (_version_signature, _read_observation, _LAST),
}


class HubIndex:
    """The hub as the controller last saw it (see the module docstring). Not thread-safe."""

    def __init__(self) -> None:
        #: The feed's cursor; None until the first listing.
        self.cursor: int | None = None
        #: Per kind, what the store's view shows, by key.
        self.mirror: dict[Kind, dict[Key, ReadObj]] = {k: {} for k in WATCHED}
        #: Per kind, the effective records (the mirror with the ledger's overlay).
        self.records: dict[Kind, dict[Key, Record]] = {k: {} for k in WATCHED}
        #: Per assumed kind, the keys the ledger overlaid at the last `overlay`.
        self._overlaid: dict[Kind, set[Key]] = {k: set() for k in ASSUMED}
        #: Objects read (parsed) so far, for tests and metrics (`reads`).
        self._reads = [0]
        #: Per kind, the records the last `overlay` replaced or removed, by key.
        self.previous: dict[Kind, dict[Key, Record]] = {k: {} for k in WATCHED}
        #: Per kind, what a writer said its objects read as (`assume_read`), by key: for the
        #: step that wrote them.
        self._known: dict[Kind, dict[Key, Record]] = {k: {} for k in WATCHED}

    def sync(self, store: Store) -> dict[Kind, set[Key]]:
        """Bring the mirror up to the store; the keys whose mirrored object changed, per kind
        (every key after a listing)."""
        if self.cursor is None:
            return self.relist(store)
        try:
            found, cursor = store.changes(self.cursor, WATCHED)
        except Expired:
            return self.relist(store)
        changed: dict[Kind, set[Key]] = {k: set() for k in WATCHED}
        for change in found:
            key = key_of(change.obj)
            table = self.mirror[change.kind]
            if change.type is ChangeType.DELETED:
                table.pop(key, None)
            else:
                table[key] = change.obj
            changed[change.kind].add(key)
        self.cursor = cursor
        return changed

    def relist(self, store: Store) -> dict[Kind, set[Key]]:
        """List every kind again: take the feed's newest cursor first, so a change made while
        listing is read again from the feed rather than missed."""
        _, cursor = store.changes(LATEST, WATCHED)
        changed: dict[Kind, set[Key]] = {}
        for kind in WATCHED:
            table = {key_of(obj): obj for obj in store.view(kind)}
            changed[kind] = set(table) | set(self.mirror[kind])
            self.mirror[kind] = table
        self.cursor = cursor
        return changed

    def overlay(
        self, store: Store, ledger: AssumeLedger, changed: dict[Kind, set[Key]]
    ) -> dict[Kind, set[Key]]:
        """Make the effective records the mirror with the ledger's entries applied (an entry
        the mirror has caught up with is forgotten; one for an object the store no longer has
        is forgotten too), and re-read the records of the `changed` keys. Returns the keys
        whose effective object changed (another version, or came or went), per kind."""
        out: dict[Kind, set[Key]] = {}
        self.previous = {k: {} for k in WATCHED}
        for kind in WATCHED:
            keys = set(changed.get(kind, ()))
            if kind in ASSUMED:
                shown = self.mirror[kind]
                for key in ledger.missing(kind, shown):
                    if store.get(kind, key[1], key[0] or None) is None:
                        ledger.forget((kind, *key))
                overrides = ledger.overrides(kind, shown)
                keys |= self._overlaid[kind] | overrides.keys()
                self._overlaid[kind] = set(overrides)
            else:
                overrides = {}
            out[kind] = self._refresh(kind, keys, overrides)
        return out

    def forget_previous(self) -> None:
        """Drop the records the last `overlay` replaced, once the step has read them: the
        versions they hold are freed in the step that replaced them, not in the next one."""
        for table in self.previous.values():
            table.clear()
        for table in self._known.values():
            table.clear()

    def _refresh(
        self, kind: Kind, keys: Iterable[Key], overrides: Mapping[Key, ReadObj | None]
    ) -> set[Key]:
        shown, records = self.mirror[kind], self.records[kind]
        previous = self.previous[kind]
        moved: set[Key] = set()
        for key in keys:
            obj = overrides[key] if key in overrides else shown.get(key)
            last = records.get(key)
            if obj is None:
                if last is not None:
                    del records[key]
                    previous[key] = last
                    moved.add(key)
                continue
            if last is not None and version_of(last.obj) == version_of(obj):
                continue
            self.put(kind, key, obj)
            if last is not None:
                previous[key] = last
            moved.add(key)
        return moved

    def put(self, kind: Kind, key: Key, obj: ReadObj, *, force: bool = False) -> Record:
        """Make `obj` the effective object at `key`, read again unless its signature is the
        last record's (`force`: read again anyway, for an object not as stored)."""
        signature_of, read, uses_last = _READERS[kind]
        signature = signature_of(obj)
        records = self.records[kind]
        last = records.get(key)
        known = self._known[kind].pop(key, None)
        if last is None and known is not None and not force:
            last = known
        if not force and last is not None and last.signature == signature:
            record = Record.kept(obj, last)
        else:
            if last is not None and uses_last == _LAST:
                last.parsed  # noqa: B018
            is_reused = uses_last == _LAST or (uses_last == _LAST_IF_READ and _is_read(last))
            record = Record(obj, signature, read, last if is_reused else None, self._reads)
        records[key] = record
        return record

    def assume_read(self, kind: Kind, obj: ReadObj, parsed: object) -> None:
        """`parsed` is what reading `obj` gives (its writer built `obj` and read it so:
        `placed_replica`). The next `put` at its key, when the index holds nothing there,
        takes it for `obj`'s version (its signature) instead of reading it, or reads the
        next version from it (a status write validates only its status). Kept for the step
        (`forget_previous` drops it)."""
        signature_of, _, _ = _READERS[kind]
        record = Record(obj, signature_of(obj), _read_nothing, None, self._reads)
        record._read, record._parsed = None, parsed
        self._known[kind][key_of(obj)] = record

    @property
    def reads(self) -> int:
        """Objects read (parsed) so far: each version once, when first used."""
        return self._reads[0]

    def put_written(self, kind: Kind, obj: ReadObj) -> bool:
        """An object as the controller's own status patch returned it: what the step works
        from now, and no change when the feed shows that version. True when it was put."""
        key = key_of(obj)
        last = self.records[kind].get(key)
        if last is None or not is_newer_or_same(version_of(last.obj), version_of(obj)):
            self.put(kind, key, obj)
            return True
        return False


class Receipts:
    """When the controller first saw each observation version (uid, resourceVersion), by its
    own clock: the `now` of the step whose change feed (or listing) showed it. A report's age
    is judged from the earlier of its stamp and its receipt (`AgentReport.aged_from`), so an
    agent whose clock runs ahead cannot stay Fresh past `stale_after_s` of silence.

    Kept by the controller across relistings (a version it saw keeps its receipt); a new
    controller process starts empty, so a report it lists first is received at that listing:
    its age is then judged from its stamp, or from the listing when the stamp is later (at most
    `max_clock_skew_s` later: a later one is not accepted). One entry per observation present.
    """

    def __init__(self, behind_after_s: float | None = None) -> None:
        self._at: dict[tuple[str, str, str], tuple[tuple[object, ...], datetime, bool]] = {}
        #: The clock-behind rule (`AgentReport.behind_after_s`): for a version that replaced
        #: one this controller saw (the agent wrote it while it watched, so it is alive), a
        #: stamp more than this before the receipt ages the report from its receipt. A version
        #: first seen in a listing keeps its stamp: it may be a dead agent's last report.
        self.behind_after_s = behind_after_s

    def __len__(self) -> int:
        return len(self._at)

    def receive(
        self, kind: Kind, key: Key, record: Record | None, now: datetime
    ) -> Observation | None:
        """What was read of the observation at `key` (None: it is gone), its report stamped
        with when this version was first received."""
        at = (kind.kind, *key)
        read: Observation | None = record.parsed if record is not None else None
        if record is None or read is None or read.report is None:
            self._at.pop(at, None)
            return read
        version = record.signature  # (uid, resourceVersion): an observation's reader's
        seen = self._at.get(at)
        if seen is None or seen[0] != version:
            seen = self._at[at] = (version, now, seen is not None)
        behind = self.behind_after_s if seen[2] else None
        report = read.report.received(seen[1], behind)
        return Observation(read.cluster, report, read.error, read.replica)

    def keep(self, kind: Kind, keys: Iterable[Key]) -> None:
        """Forget the receipts of `kind` but those of `keys` (after a listing: the ones that
        went while the controller was not watching)."""
        present = {(kind.kind, *key) for key in keys}
        for at in [at for at in self._at if at[0] == kind.kind and at not in present]:
            del self._at[at]


def fresh_view(store: Store) -> dict[Kind, dict[Key, ReadObj]]:
    """Every watched object as one listing shows it, by kind and key (the index's oracle)."""
    return {kind: {key_of(o): o for o in store.view(kind)} for kind in WATCHED}
