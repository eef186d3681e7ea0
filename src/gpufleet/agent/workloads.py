"""Materialize: make the workload cluster's owned objects equal what its replicas want.

`Workloads.materialize(replicas)` makes the cluster's ResourceClaimTemplates, Deployments,
LeaderWorkerSets and PodDisruptionBudgets equal what `materialize` wants for the assigned
replicas: create what is missing, update what differs (templates are immutable in
`resource.k8s.io/v1`, so a changed template is deleted and recreated), delete what no replica
wants.

A pass costs what changed, told by versions, never by object identity:

- **Desired set** (`DesiredSet`). What a replica wants depends on its name, namespace, uid,
  generation (which moves exactly when its spec does) and labels, so a replica whose
  resourceVersion is unchanged, or whose new version has the same of those (a status write),
  keeps its desired objects. When the last set was plain (every replica valid, no object wanted
  by two), the set is patched with the replicas that changed and says, per kind, which keys it
  changed; otherwise it is made whole, in the replicas' order (the last replica wanting an
  object wins), and every key is looked at.
- **Kind pass** (`Workloads._materialize_kind`). A wanted key whose local object was found to
  hold it is not compared again while the local object's (uid, generation, labels) and what
  the wanted object was made from stay the same (a status write moves neither: the store
  moves `generation` exactly when the spec changes). With the changed keys known, only
  those, the keys of the local objects whose version moved (or came or went) and the keys the
  last pass wrote are looked at; none of those is a pass with nothing to do.

Given the cluster's policy (`gpufleet.agent.policy`; one per agent, so it is not part of a
signature), `materialize` refuses a replica that breaks it (`PolicyDenied`, a `ReplicaInvalid`):
nothing of it is made, and the pass says so as it does for an invalid replica. A namespace the
agent creates carries the policy's Pod Security Admission labels (`namespace_body`); one that
exists is left as it is.

Given a `Steerer` (`gpufleet.agent.steer`), a replica's objects are made steered to the nodes it
chooses for the replica's claiming pods, once per replica version (new replicas in key order,
each against what the earlier ones took); a local workload equal to what is wanted but for its
steering keeps its steering (`keep_steering`), so running pods are not rolled to move them.
Under `Gated` steering each pass then gives every gated pod its node and lifts its gate
(`gpufleet.agent.gates`).
"""

from __future__ import annotations

import logging
import operator
from collections.abc import Callable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import Any, Final, TypeVar

from gpufleet.agent.gates import lift_gates
from gpufleet.agent.materialize import OWNED_SELECTOR, ReplicaInvalid, materialize
from gpufleet.agent.model import keys_and_versions, moved_keys, versions_of
from gpufleet.agent.pod_security import RESTRICTED
from gpufleet.agent.policy import ClusterPolicy, namespace_body
from gpufleet.agent.steer import Steerer, keep_steering, written_steering
from gpufleet.core.model import Steering
from gpufleet.store.port import (
    DEPLOYMENT,
    LEADER_WORKER_SET,
    NAMESPACE,
    POD,
    POD_DISRUPTION_BUDGET,
    RESOURCE_CLAIM_TEMPLATE,
    AlreadyExists,
    Kind,
    NotFound,
    Obj,
    Store,
    StoreError,
)

log = logging.getLogger(__name__)

#: The kinds the agent owns on the workload cluster, in the order it writes them (templates
#: before the workloads whose pods reference them; each replica's PodDisruptionBudget last).
OWNED_KINDS: Final = (
    RESOURCE_CLAIM_TEMPLATE,
    DEPLOYMENT,
    LEADER_WORKER_SET,
    POD_DISRUPTION_BUDGET,
)

_T = TypeVar("_T")
_Key = tuple[str, str]
#: A replica's (namespace, name), as found (possibly not strings).
_ReplicaKey = tuple[object, object]
#: One desired local object: its kind, (namespace, name) and body (shared: never changed).
_Desired = tuple[Kind, _Key, Obj]
#: What a replica's desired objects are made from: (uid, generation, labels); None when a
#: replica lacks a uid or a version (then they are made again every time).
_Signature = tuple[object, object, object] | None

_META: Final = operator.methodcaller("get", "metadata")
_NAMESPACE: Final = operator.methodcaller("get", "namespace")
_NAME: Final = operator.methodcaller("get", "name")
_VERSION: Final = operator.methodcaller("get", "resourceVersion")


@dataclass(slots=True)
class PassOutcome:
    """The writes a pass made, for the step's outcome."""

    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class _Wants:
    """A replica's desired objects, and what they were made from."""

    signature: _Signature
    desired: tuple[_Desired, ...] | ReplicaInvalid


@dataclass(frozen=True, slots=True)
class DesiredSet:
    """Every replica's desired objects by kind and (namespace, name), their namespaces
    (sorted), the errors of invalid replicas, and per kind the keys that changed since the last
    set (None: not known, every key is looked at)."""

    desired: Mapping[Kind, Mapping[_Key, Obj]]
    #: What each desired object was made from (equal: the same object is wanted).
    made_from: Mapping[tuple[Kind, _Key], object]
    namespaces: list[str]
    errors: list[str]
    changed: Mapping[Kind, AbstractSet[_Key] | None]


class DesiredState:
    """The desired set, kept between calls by replica key and version (see the module)."""

    def __init__(self, policy: ClusterPolicy | None = None, steerer: Steerer | None = None) -> None:
        self.policy = policy or ClusterPolicy()
        #: Chooses the nodes of a replica's claiming pods when its objects are made (None: no
        #: steering).
        self.steerer = steerer
        self._keys: list[_ReplicaKey] = []
        self._versions: list[object] = []
        self._wants: dict[_ReplicaKey, _Wants] = {}
        self._desired: dict[Kind, dict[_Key, Obj]] = {k: {} for k in OWNED_KINDS}
        #: Who wants each object, for a plain set; None when the set is not plain.
        self._owners: dict[tuple[Kind, _Key], _ReplicaKey] | None = None
        #: What each desired object was made from (of replicas with a signature).
        self._made_from: dict[tuple[Kind, _Key], object] = {}
        self._namespaces: dict[str, int] = {}
        self._errors: list[str] = []
        #: How many sets were patched rather than made whole (for tests).
        self.patches = 0

    def update(self, replicas: Sequence[Mapping[str, Any]]) -> DesiredSet:
        fast = versions_of(replicas)
        if fast is not None and fast == self._versions and None not in fast:
            return self._set({})  # the same replicas, at the same versions
        found = keys_and_versions(replicas)
        if found is not None:
            keys: list[_ReplicaKey] = list(found[0])
            versions = found[1]
        else:
            metas = [_META(r) or {} for r in replicas]
            keys = list(zip(map(_NAMESPACE, metas), map(_NAME, metas), strict=True))
            versions = list(map(_VERSION, metas))
        changed = self._changed_replicas(keys, versions)
        self._keys, self._versions = keys, versions
        if changed is not None and self._owners is not None:
            by_key = dict(zip(keys, replicas, strict=True))
            kinds = self._patched(changed, by_key)
            if kinds is not None:
                self.patches += 1
                return self._set(kinds)
        return self._made_whole(replicas, keys)

    def _changed_replicas(
        self, keys: list[_ReplicaKey], versions: list[object]
    ) -> set[_ReplicaKey] | None:
        """The replicas that came, went or have another version; None when two share a key."""
        is_same_set = self._owners is not None and keys == self._keys  # no key twice, then
        if not is_same_set and len(set(keys)) != len(keys):
            return None
        return moved_keys(keys, versions, self._keys, self._versions)

    def _wants_of(self, key: _ReplicaKey, replica: Mapping[str, Any]) -> _Wants:
        """What the replica wants: the held desired objects when made from the same inputs."""
        meta = replica.get("metadata") or {}
        signature: _Signature = None
        if meta.get("uid") is not None and meta.get("resourceVersion") is not None:
            signature = (meta.get("uid"), meta.get("generation", 1), meta.get("labels"))
        held = self._wants.get(key)
        if held is not None and signature is not None and held.signature == signature:
            return held
        return _Wants(signature, _desired_of(replica, self.policy, self.steerer))

    def _patched(
        self, changed: set[_ReplicaKey], by_key: Mapping[_ReplicaKey, Mapping[str, Any]]
    ) -> dict[Kind, set[_Key]] | None:
        """Patch the plain set with the changed replicas; the keys changed per kind, or None
        when the set would not be plain (then it is made whole)."""
        assert self._owners is not None
        owners = self._owners
        kinds: dict[Kind, set[_Key]] = {}
        # In key order: a new replica's steering is chosen here, against what earlier ones took.
        made = {k: self._wants_of(k, by_key[k]) for k in sorted(changed, key=_order) if k in by_key}
        if any(isinstance(w.desired, ReplicaInvalid) for w in made.values()):
            return None
        for key in changed:
            old = self._wants.get(key)
            if old is made.get(key):
                continue
            if old is not None:
                self._drop(key, old, kinds)
        for key, wants in made.items():
            if wants is self._wants.get(key):
                continue
            assert not isinstance(wants.desired, ReplicaInvalid)
            for kind, obj_key, obj in wants.desired:
                if (kind, obj_key) in owners:
                    return None  # two replicas want it
                owners[(kind, obj_key)] = key
                self._desired[kind][obj_key] = obj
                if wants.signature is not None:
                    self._made_from[(kind, obj_key)] = (key, wants.signature)
                self._namespaces[obj_key[0]] = self._namespaces.get(obj_key[0], 0) + 1
                kinds.setdefault(kind, set()).add(obj_key)
            self._wants[key] = wants
        return kinds

    def _drop(self, key: _ReplicaKey, old: _Wants, kinds: dict[Kind, set[_Key]]) -> None:
        assert self._owners is not None and not isinstance(old.desired, ReplicaInvalid)
        del self._wants[key]
        for kind, obj_key, _ in old.desired:
            del self._owners[(kind, obj_key)], self._desired[kind][obj_key]
            self._made_from.pop((kind, obj_key), None)
            n = self._namespaces[obj_key[0]] - 1
            if n:
                self._namespaces[obj_key[0]] = n
            else:
                del self._namespaces[obj_key[0]]
            kinds.setdefault(kind, set()).add(obj_key)

    def _made_whole(
        self, replicas: Sequence[Mapping[str, Any]], keys: list[_ReplicaKey]
    ) -> DesiredSet:
        """The set replica by replica, in their order (the last wanting an object wins)."""
        wants = {key: self._wants_of(key, r) for key, r in zip(keys, replicas, strict=True)}
        desired: dict[Kind, dict[_Key, Obj]] = {k: {} for k in OWNED_KINDS}
        owners: dict[tuple[Kind, _Key], _ReplicaKey] | None = {}
        made_from: dict[tuple[Kind, _Key], object] = {}
        errors: list[str] = []
        for key, replica in zip(keys, replicas, strict=True):
            objs = wants[key].desired
            if isinstance(objs, ReplicaInvalid):
                meta = replica.get("metadata") or {}
                errors.append(f"replica {meta.get('namespace')}/{meta.get('name')}: {objs}")
                owners = None
                continue
            for kind, obj_key, obj in objs:
                if owners is not None and (kind, obj_key) in owners:
                    owners = None  # wanted twice: the last replica's wins
                if owners is not None:
                    owners[(kind, obj_key)] = key
                desired[kind][obj_key] = obj
                made_from.pop((kind, obj_key), None)
                if wants[key].signature is not None:
                    made_from[(kind, obj_key)] = (key, wants[key].signature)
        if len(wants) != len(keys):
            owners = None  # two replicas of one key
        self._wants, self._desired, self._owners, self._errors = wants, desired, owners, errors
        self._made_from = made_from
        self._namespaces = {}
        for by in desired.values():
            for ns, _ in by:
                self._namespaces[ns] = self._namespaces.get(ns, 0) + 1
        return self._set(dict.fromkeys(OWNED_KINDS))

    def _set(self, changed: Mapping[Kind, AbstractSet[_Key] | None]) -> DesiredSet:
        return DesiredSet(
            self._desired, self._made_from, sorted(self._namespaces), self._errors, changed
        )


def _order(key: _ReplicaKey) -> tuple[str, str]:
    return (str(key[0]), str(key[1]))


def _desired_of(
    replica: Mapping[str, Any], policy: ClusterPolicy, steerer: Steerer | None = None
) -> tuple[_Desired, ...] | ReplicaInvalid:
    """`materialize(replica, policy)` keyed for the diff, steered to the nodes `steerer`
    chooses; the error when the replica is invalid or refused."""
    try:
        if steerer is None or not steerer.is_on:
            objs = materialize(replica, policy)
        else:
            check = materialize(replica, policy)  # refused or invalid: nothing is chosen
            choice = steerer.choose(replica)
            # The policy allowed the replica just now: it is not checked again.
            hardened = policy.level == RESTRICTED
            objs = (
                materialize(replica, None, choice, steerer.mode, hardened=hardened)
                if choice
                else check
            )
    except ReplicaInvalid as e:
        return e
    return tuple((_kind(o), (o["metadata"]["namespace"], o["metadata"]["name"]), o) for o in objs)


@dataclass(frozen=True, slots=True)
class _KindPass:
    """What one kind's last pass found (`Workloads._materialize_kind`)."""

    #: Each listed local object's (namespace, name) and resourceVersion, in the listing's
    #: order (the keys are unique: a listing with two of one key is not kept).
    keys: list[_Key]
    version_list: list[object]
    #: Each wanted key whose local object holds what is wanted: the local object's
    #: `_spec_signature` and what the wanted object was made from.
    agreeing: dict[_Key, tuple[object, object]]
    #: The keys the pass wrote (or failed to).
    acted: set[_Key]
    #: The versions of the objects listed, in the listing's order (None: not all had one).
    listing: list[object] | None


class Workloads:
    """The materialize half of an agent's step (see the module docstring)."""

    def __init__(
        self,
        local: Store,
        retry: Callable[[Callable[[], Any]], Any],
        policy: ClusterPolicy | None = None,
        steerer: Steerer | None = None,
    ) -> None:
        self.local = local
        self._retry = retry
        self.policy = policy or ClusterPolicy()
        self.steerer = steerer
        self.desired = DesiredState(self.policy, steerer)
        self._passes: dict[Kind, _KindPass] = {}
        #: Whether a pod may still carry gpufleet's scheduling gate (`lift_gates`).
        self._may_hold_gated = True
        #: Whether the steering written on the local workloads was read (`Steerer.restore`).
        self._has_restored = False

    def _written_steering(self) -> dict[tuple[str, str], Any]:
        """The steering written on the local workloads and where their pods are bound."""
        try:
            workloads = [
                *self.local.view(DEPLOYMENT, None, OWNED_SELECTOR),
                *self.local.view(LEADER_WORKER_SET, None, OWNED_SELECTOR),
            ]
        except NotFound:  # LeaderWorkerSet not served
            workloads = list(self.local.view(DEPLOYMENT, None, OWNED_SELECTOR))
        except StoreError as e:
            log.warning("reading the local workloads' steering: %s", e)
            return {}
        return written_steering(workloads, self.local.view(POD, None, OWNED_SELECTOR))

    def materialize(self, replicas: Sequence[Mapping[str, Any]], outcome: PassOutcome) -> None:
        """Make the local workloads equal the desired set for `replicas`."""
        if self.steerer is not None:
            self.steerer.begin(replicas)
            if not self._has_restored and self.steerer.is_on:
                # A materializer that starts keeps the steering its workloads hold.
                self.steerer.restore(self._written_steering())
            self._has_restored = True
        wanted = self.desired.update(replicas)
        if self.steerer is not None:
            self.steerer.forget_written()
        outcome.errors.extend(wanted.errors)
        for ns in wanted.namespaces:
            self._ensure_namespace(ns, outcome)
        for kind in OWNED_KINDS:
            try:
                # Read-only here: an update re-reads the object it changes.
                listed = self.local.view(kind, None, OWNED_SELECTOR)
            except NotFound:
                # The kind is not served (LeaderWorkerSet without its CRD): nothing of it exists;
                # a replica that needs it fails on create and says so, the others go on.
                listed = []
            self._materialize_kind(kind, wanted, listed, outcome)
        is_gated = self.steerer is not None and self.steerer.mode is Steering.GATED
        if is_gated or self._may_hold_gated:
            # Gated steering: each gated pod gets its node and loses its gate. Also once after
            # a start, and while pods were found gated, so that no pod keeps a gate when the
            # mode changed.
            gates = lift_gates(self.local)
            self._may_hold_gated = bool(gates.pinned or gates.unpinned or gates.errors)
            outcome.updated.extend(f"Pod {p} on {n}" for p, n in sorted(gates.pinned.items()))
            outcome.updated.extend(f"Pod {p} (no node)" for p in gates.unpinned)
            outcome.errors.extend(gates.errors)

    def _materialize_kind(
        self,
        kind: Kind,
        wanted: DesiredSet,
        listed: Sequence[Mapping[str, Any]],
        outcome: PassOutcome,
    ) -> None:
        """Create or update each wanted object that the local one does not hold (sorted by
        key), then delete each listed object not wanted (sorted)."""
        listing = versions_of(listed)
        last = self._passes.get(kind)
        changed = wanted.changed.get(kind, set())
        if (
            last is not None
            and not last.acted
            and changed is not None
            and not changed
            and listing is not None
            and listing == last.listing
        ):
            return  # compared in C: the same local versions, nothing wanted changed or failed
        found = keys_and_versions(listed)
        if found is None:
            metas = list(map(_META, listed))
            found = (
                list(zip(map(_NAMESPACE, metas), map(_NAME, metas), strict=True)),
                list(map(_VERSION, metas)),
            )
        keys, version_list = found
        existing = dict(zip(keys, listed, strict=True))
        self._passes.pop(kind, None)
        looked_at = self._keys_to_look_at(kind, wanted, (keys, version_list), last)
        before = {} if last is None else last.agreeing
        if looked_at is None:
            agreeing, looked_at = {}, set(wanted.desired[kind]) | existing.keys()
        else:
            # Every pair held but for these keys is one of keys not looked at: it stays.
            agreeing = dict(before)
            for key in looked_at:
                agreeing.pop(key, None)
        acted = self._write(kind, wanted, sorted(looked_at), existing, (before, agreeing), outcome)
        if len(existing) == len(listed):
            self._passes[kind] = _KindPass(keys, version_list, agreeing, acted, listing)

    def _keys_to_look_at(
        self,
        kind: Kind,
        wanted: DesiredSet,
        listed: tuple[list[_Key], list[object]],
        last: _KindPass | None,
    ) -> set[_Key] | None:
        """The keys a pass must look at; None: every one. `listed`: the keys and versions
        of the local objects, in the listing's order."""
        changed = wanted.changed.get(kind, set())
        if last is None or changed is None:
            return None
        keys, versions = listed
        return last.acted | changed | moved_keys(keys, versions, last.keys, last.version_list)

    def _write(
        self,
        kind: Kind,
        wanted: DesiredSet,
        looked_at: list[_Key],
        existing: Mapping[_Key, Mapping[str, Any]],
        agreement: tuple[Mapping[_Key, tuple[object, object]], dict[_Key, tuple[object, object]]],
        outcome: PassOutcome,
    ) -> set[_Key]:
        """The pass over the keys `looked_at`: the keys it wrote (or failed to). `agreement`:
        the pairs found to agree last pass, and those found to agree now (filled in)."""
        before, agreeing = agreement
        acted: set[_Key] = set()
        desired = wanted.desired[kind]
        for key in looked_at:
            want = desired.get(key)
            if want is None:
                continue
            made_from = wanted.made_from.get((kind, key))
            pair = (_spec_signature(existing.get(key)), made_from)
            if (
                pair[0] is not None and made_from is not None and before.get(key) == pair
            ) or self._apply(kind, want, existing.get(key), outcome):
                agreeing[key] = pair
            else:
                acted.add(key)
        for key in looked_at:
            if key in existing and key not in desired:
                acted.add(key)
                self._delete_local(kind, key[1], key[0], outcome)
        return acted

    def _apply(
        self, kind: Kind, want: Obj, current: Mapping[str, Any] | None, outcome: PassOutcome
    ) -> bool:
        """Create or update the local object to hold `want`; True when it already did."""
        ref = _ref(kind, want["metadata"]["namespace"], want["metadata"]["name"])
        try:
            if current is None:
                self.local.create(want)
                outcome.created.append(ref)
                return False
            if _contains(current, {"metadata": {"labels": want["metadata"]["labels"]}}) and (
                _contains(current.get("spec"), want["spec"])
                or (
                    kind != RESOURCE_CLAIM_TEMPLATE
                    and _contains(current.get("spec"), keep_steering(want, current)["spec"])
                )
            ):
                # Equal but for its steering: running pods are not rolled to move them.
                return True
            if kind == RESOURCE_CLAIM_TEMPLATE:
                # Immutable spec: replace it. Pods already running keep the claims they have.
                self.local.delete(kind, want["metadata"]["name"], want["metadata"]["namespace"])
                self.local.create(want)
                outcome.updated.append(ref)
                return False

            def update() -> None:
                latest = self.local.get(
                    kind, want["metadata"]["name"], want["metadata"]["namespace"]
                )
                if latest is None:
                    self.local.create(want)
                    return
                latest["metadata"]["labels"] = dict(want["metadata"]["labels"])
                latest["spec"] = want["spec"]
                self.local.update(latest)

            self._retry(update)
            outcome.updated.append(ref)
        except StoreError as e:
            outcome.errors.append(f"apply {ref}: {e}")
        return False

    def _delete_local(self, kind: Kind, name: str, ns: str, outcome: PassOutcome) -> None:
        try:
            self.local.delete(kind, name, ns)
            outcome.deleted.append(_ref(kind, ns, name))
        except NotFound:
            pass
        except StoreError as e:
            outcome.errors.append(f"delete {_ref(kind, ns, name)}: {e}")

    def _ensure_namespace(self, ns: str, outcome: PassOutcome) -> None:
        try:
            if self.local.get(NAMESPACE, ns) is None:
                self.local.create(namespace_body(ns, self.policy))
        except AlreadyExists:
            pass
        except StoreError as e:
            outcome.errors.append(f"namespace {ns}: {e}")


def _contains(current: object, want: object) -> bool:
    """Whether `current` holds every field of `want` (the API server may add defaults)."""
    if isinstance(want, Mapping):
        return isinstance(current, Mapping) and all(
            k in current and _contains(current[k], v) for k, v in want.items()
        )
    if isinstance(want, list):
        return (
            isinstance(current, list)
            and len(current) == len(want)
            and all(_contains(c, w) for c, w in zip(current, want, strict=True))
        )
    return current == want


def _spec_signature(obj: Mapping[str, Any] | None) -> tuple[object, object, object] | None:
    """What `_apply`'s comparison reads of a local object, signed: its (uid, generation,
    labels). The store moves `generation` whenever the spec changes (the port's contract), so
    a write of its status alone leaves it; None when the object is absent or unsigned."""
    meta = obj.get("metadata") if obj is not None else None
    if not isinstance(meta, Mapping):
        return None
    uid, generation = meta.get("uid"), meta.get("generation")
    if uid is None or generation is None:
        return None
    return (uid, generation, meta.get("labels"))


def _kind(obj: Mapping[str, Any]) -> Kind:
    for kind in OWNED_KINDS:
        if kind.api_version == obj["apiVersion"] and kind.kind == obj["kind"]:
            return kind
    raise ValueError(f"not an owned kind: {obj['apiVersion']} {obj['kind']}")


def _ref(kind: Kind, ns: str, name: str) -> str:
    return f"{kind.kind} {ns}/{name}"
