"""The cluster policy's verdicts on the agent's replicas, and how a refusal reaches the hub.

`PolicyGate` keeps one verdict per assigned ModelReplica (`gpufleet.agent.policy.check_replica`)
between steps, keyed by the replica's (namespace, name) and reused while its signature (uid,
resourceVersion, generation) is unchanged; a replica without a resourceVersion (not read from
an API) is checked every time (no signature, no reuse). Replicas read from a store are diffed
with the last call's by (namespace, name) and resourceVersion, so a call looks only at the
replicas that came, went or moved. The plain computation is
`check_replica` on each replica: `refusals` gives what it gives (an oracle test holds it to that).

A refused replica's observation (`ObservedReplica`) says so: `podsScheduled: false` (it has
no pods, and never will under this policy) and the condition `PolicyAllowed=False`, reason
`PolicyDenied`, whose message names every violating field and rule (`annotate`). The
observation of an allowed replica is handed through as it is, the very object, so the
runner's reuse by identity is untouched; so is an annotated one while neither its
observation nor its verdict changed.

The runner's report is made incrementally from the free-device table's snapshot, which tells
which replicas' observations changed; a verdict can change while the observation does not (a
pod template gains `hostNetwork`), so `annotate` also says which replicas' refusals changed
(`moved`), and `annotated` gives one replica's observation as `annotate` gave it.

What the materializer does with a refused replica is its own business (`materialize` refuses
it given the same policy); this module only reports.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Mapping, Sequence
from typing import Any

from gpufleet.agent.model import (
    Condition,
    ConditionStatus,
    ObservationResult,
    ObservedReplica,
    keys_and_versions,
)
from gpufleet.agent.policy import (
    POLICY_ALLOWED,
    REASON_POLICY_DENIED,
    ClusterPolicy,
    Violation,
    check_replica,
    summary,
)

_Key = tuple[str, str]
_Signature = tuple[object, object, object]


def refusal(violations: Sequence[Violation]) -> Condition:
    """The `PolicyAllowed=False` condition of a refused replica's observation."""
    return Condition(
        POLICY_ALLOWED, ConditionStatus.FALSE, REASON_POLICY_DENIED, summary(violations)
    )


class PolicyGate:
    """One agent's policy verdicts, kept between steps. Not thread-safe (the agent's loop)."""

    def __init__(self, policy: ClusterPolicy) -> None:
        self.policy = policy
        #: Each replica's signature and violations (empty: allowed), by (namespace, name).
        self._verdicts: dict[_Key, tuple[_Signature, tuple[Violation, ...]]] = {}
        #: The (namespace, name) -> resourceVersion of the replicas of the last `refusals`
        #: call (None: none yet, or they could not be diffed), and the refusals it gave.
        self._versions: dict[_Key, object] | None = None
        self._refused_last: Mapping[_Key, tuple[Violation, ...]] = {}
        #: Each annotated observation: the one observed (held), its violations, the result.
        self._annotated: dict[_Key, tuple[ObservedReplica, tuple[Violation, ...], ObservedReplica]]
        self._annotated = {}
        #: The last `annotate` call's observations and refusals (held) and what it gave.
        self._last_annotated: tuple[object, object, tuple[ObservedReplica, ...]] | None = None
        #: The refusals the last `annotate` call used.
        self._refused: Mapping[_Key, tuple[Violation, ...]] = {}
        #: The replicas whose refusal the last `annotate` call changed (came, went or moved).
        self.moved: frozenset[_Key] = frozenset()

    def refusals(
        self, replicas: Sequence[Mapping[str, Any]]
    ) -> Mapping[_Key, tuple[Violation, ...]]:
        """The violations of each refused replica, by (namespace, name); the same mapping as
        last call while the refusals are equal. Replicas read from a store (each with a
        distinct (namespace, name) and a resourceVersion) are diffed with the last call's by
        key and version, and only those that came, went or moved are looked at."""
        found = keys_and_versions(replicas)
        keys = found[0] if found is not None else []
        versions = dict(zip(keys, found[1], strict=True)) if found is not None else {}
        if (
            found is None
            or len(versions) != len(keys)
            or None in versions.values()
            or not set(map(type, itertools.chain.from_iterable(keys))) <= {str}
        ):
            self._versions = None
            return self._refusals_whole(replicas)
        last = self._refused_last
        if self._versions is None:  # the last call looked at every replica (or there was none)
            self._versions = versions
            return self._refusals_whole(replicas)
        if versions == self._versions:
            return last
        changed = {k for k, _ in versions.items() ^ self._versions.items()}
        self._versions = versions
        by_key = dict(zip(keys, replicas, strict=True))
        verdicts = self._verdicts
        for key in changed:
            replica = by_key.get(key)
            if replica is None:
                verdicts.pop(key, None)
            else:
                verdicts[key] = self._verdict(key, replica)
        refused = {k: v[1] for k, v in verdicts.items() if v[1]}
        self._refused_last = last if refused == last else refused
        return self._refused_last

    def _refusals_whole(
        self, replicas: Sequence[Mapping[str, Any]]
    ) -> Mapping[_Key, tuple[Violation, ...]]:
        """`refusals` looking at every replica (reusing verdicts by signature)."""
        verdicts: dict[_Key, tuple[_Signature, tuple[Violation, ...]]] = {}
        refused: dict[_Key, tuple[Violation, ...]] = {}
        for replica in replicas:
            meta = replica.get("metadata")
            meta = meta if isinstance(meta, Mapping) else {}
            key = (str(meta.get("namespace")), str(meta.get("name")))
            found = verdicts[key] = self._verdict(key, replica)
            if found[1]:
                refused[key] = found[1]
        self._verdicts = verdicts
        last = self._refused_last
        self._refused_last = last if refused == last else refused
        return self._refused_last

    def _verdict(
        self, key: _Key, replica: Mapping[str, Any]
    ) -> tuple[_Signature, tuple[Violation, ...]]:
        """The replica's verdict: the held one while its signature is the same."""
        meta = replica.get("metadata")
        meta = meta if isinstance(meta, Mapping) else {}
        signature = (meta.get("uid"), meta.get("resourceVersion"), meta.get("generation"))
        found = self._verdicts.get(key)
        if found is None or found[0] != signature or signature[1] is None:
            found = (signature, tuple(check_replica(replica, self.policy)))
        return found

    def annotate(
        self, result: ObservationResult, replicas: Sequence[Mapping[str, Any]]
    ) -> ObservationResult:
        """`result` with each refused replica's observation saying so (see the module)."""
        refused = self.refusals(replicas)
        before, self._refused = self._refused, refused
        if refused is before:
            self.moved = frozenset()
        else:
            self.moved = frozenset(k for k, _ in refused.items() ^ before.items())
        if not refused:
            self._annotated, self._last_annotated = {}, None
            return result
        held = self._last_annotated
        if held is not None and held[0] is result.replicas and held[1] is refused:
            return dataclasses.replace(result, replicas=held[2])
        annotated: dict[_Key, tuple[ObservedReplica, tuple[Violation, ...], ObservedReplica]] = {}
        out: list[ObservedReplica] = []
        for observed in result.replicas:
            key = (observed.namespace, observed.name)
            violations = refused.get(key)
            if violations is None:
                out.append(observed)
                continue
            last = self._annotated.get(key)
            if last is None or last[0] is not observed or last[1] != violations:
                changed = dataclasses.replace(
                    observed,
                    pods_scheduled=False,
                    conditions=(*observed.conditions, refusal(violations)),
                )
                last = (observed, violations, changed)
            annotated[key] = last
            out.append(last[2])
        replicas_out = tuple(out)
        self._annotated = annotated
        self._last_annotated = (result.replicas, refused, replicas_out)
        return dataclasses.replace(result, replicas=replicas_out)

    def annotated(self, observed: ObservedReplica | None) -> ObservedReplica | None:
        """`observed` as the last `annotate` call gave it (or would have, for an observation
        it was not given): refused, it says so; allowed, it is handed through."""
        if observed is None:
            return None
        key = (observed.namespace, observed.name)
        last = self._annotated.get(key)
        if last is not None and last[0] is observed:
            return last[2]
        violations = self._refused.get(key)
        if violations is None:
            return observed
        return dataclasses.replace(
            observed,
            pods_scheduled=False,
            conditions=(*observed.conditions, refusal(violations)),
        )
