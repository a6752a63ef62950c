"""Rules between pods: required pod anti-affinity honoured, every other required inter-pod
rule refused by name, never broken.

kube-scheduler's InterPodAffinity filter (pkg/scheduler/framework/plugins/interpodaffinity/
filtering.go) keeps a pod off a node when (a) a pod already in the node's topology domain
matches one of the incoming pod's required anti-affinity terms ("node(s) didn't match pod
anti-affinity rules") or (b) a pod already there has a required anti-affinity term the
incoming pod matches: the symmetric check ("node(s) didn't satisfy existing pods
anti-affinity rules"). A domain is the value of the term's ``topologyKey`` label on the
node; a node without that label is never excluded by it. A term matches a pod when its
``labelSelector`` does (absent: nothing; ``{}``: everything) and the pod's namespace is one
of the term's: ``namespaces`` together with the namespaces ``namespaceSelector`` selects,
the owning pod's own namespace when neither is given, every namespace for an empty
``namespaceSelector``. ``matchLabelKeys``/``mismatchLabelKeys`` add ``key In``/``key NotIn``
the owning pod's value, as the API server merges them (idempotent if it already did).

What fluxnode does with them (docs/binder.md, "Where a pod may run"):

- against pods that occupy nodes (any scheduler's, and ours placed but not bound yet),
  both checks (a) and (b), for any topologyKey: the binder's view of them is indexed
  by label and by term (cluster_state.py `Occupants`), so a group costs the pods that
  match, not a scan of all pods;
- inside one group (pods placed in one all-or-nothing request): pods that match each
  other's terms on ``kubernetes.io/hostname`` are asked one per node (the jobspec's
  node-level form, Fluxion's ``flux submit -N``); a group whose pods keep apart on another
  key, or whose pods differ in shape, is refused (one request cannot say it);
- required ``podAffinity``, a non-empty ``namespaceSelector`` (the binder does not watch
  namespaces) and topology spread constraints with ``whenUnsatisfiable: DoNotSchedule``
  are refused: the pod is Unschedulable with the field named, never placed in breach.
  Preferred terms and ``ScheduleAnyway`` are preferences and are ignored.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Collection, Mapping
from dataclasses import dataclass

from fluxnode.agent.kube.node_affinity import NodeAffinityError, Requirement, requirement

HOSTNAME = "kubernetes.io/hostname"
SELECTOR_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")
REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
NOT_EVALUATED = "is not evaluated by fluxnode; {fix} or the default scheduler"
MISMATCH_INCOMING = "node(s) didn't match pod anti-affinity rules"
MISMATCH_EXISTING = "node(s) didn't satisfy existing pods anti-affinity rules"


class PodAffinityError(NodeAffinityError):
    """A rule between pods that is malformed or that fluxnode does not place by; the message
    names the field and is what the pod is told."""


@dataclass(frozen=True, slots=True)
class Selector:
    """A labelSelector: every requirement must hold (matchLabels are ``In`` requirements).
    `everything` for ``{}``; an absent selector is `NOTHING`."""

    requirements: tuple[Requirement, ...] = ()
    nothing: bool = False

    def matches(self, labels: Mapping[str, str]) -> bool:
        return not self.nothing and all(r.matches(labels.get(r.key)) for r in self.requirements)

    def keys(self) -> list[tuple[str, str]]:
        """(key, value) pairs one of which every matching pod carries: an ``In`` with one
        value (a matchLabels entry), for the label index; [] when none narrows it."""
        return [(r.key, r.values[0]) for r in self.requirements
                if r.operator == "In" and len(r.values) == 1]


NOTHING = Selector(nothing=True)


@dataclass(frozen=True, slots=True)
class AntiTerm:
    """One required anti-affinity term, resolved against its owning pod: the namespaces it
    looks in (None: all of them)."""

    selector: Selector
    namespaces: frozenset[str] | None
    topology_key: str

    def matches(self, namespace: str, labels: Mapping[str, str]) -> bool:
        return (self.namespaces is None or namespace in self.namespaces) and \
            self.selector.matches(labels)


@dataclass(frozen=True, slots=True)
class PodRules:
    """A pod's required anti-affinity terms (empty for most pods)."""

    anti: tuple[AntiTerm, ...] = ()


NONE = PodRules()


def has_rules(pod: dict) -> bool:
    """Whether the pod says anything about other pods (cheap: one per pod per walk)."""
    spec = pod.get("spec") or {}
    affinity = spec.get("affinity") or {}
    if not isinstance(affinity, dict):
        return False  # refused by the API server (and by pod_placement, which reads it first)
    return bool(affinity.get("podAntiAffinity") or affinity.get("podAffinity")
                or spec.get("topologySpreadConstraints"))


def pod_rules(pod: dict) -> PodRules:
    """The pod's required anti-affinity terms; PodAffinityError naming the field for a
    malformed one, or for a required rule between pods that fluxnode does not place by."""
    if not has_rules(pod):
        return NONE
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    namespace = meta.get("namespace") or "default"
    labels = meta.get("labels") or {}
    affinity = spec.get("affinity") or {}
    if (affinity.get("podAffinity") or {}).get(REQUIRED):
        raise PodAffinityError(
            f"spec.affinity.podAffinity.{REQUIRED} "
            + NOT_EVALUATED.format(fix="use preferredDuringSchedulingIgnoredDuringExecution"))
    spread = spec.get("topologySpreadConstraints") or []
    if not isinstance(spread, list):
        raise PodAffinityError("spec.topologySpreadConstraints: must be a list")
    for i, c in enumerate(spread):
        when = c.get("whenUnsatisfiable") if isinstance(c, dict) else None
        if when not in ("DoNotSchedule", "ScheduleAnyway"):
            raise PodAffinityError(f"spec.topologySpreadConstraints[{i}].whenUnsatisfiable: "
                                   f"{when!r} is not DoNotSchedule or ScheduleAnyway")
        if when == "DoNotSchedule":
            raise PodAffinityError(
                f"spec.topologySpreadConstraints[{i}]: whenUnsatisfiable DoNotSchedule "
                + NOT_EVALUATED.format(fix="use ScheduleAnyway"))
    path = f"spec.affinity.podAntiAffinity.{REQUIRED}"
    raw = (affinity.get("podAntiAffinity") or {}).get(REQUIRED)
    raw = [] if raw is None else raw
    if not isinstance(raw, list):
        raise PodAffinityError(f"{path}: must be a list of terms")
    return PodRules(tuple(_term(t, f"{path}[{i}]", namespace, labels)
                          for i, t in enumerate(raw)))


def _term(raw: object, path: str, namespace: str, labels: Mapping[str, str]) -> AntiTerm:
    if not isinstance(raw, dict):
        raise PodAffinityError(f"{path}: must be an object")
    key = raw.get("topologyKey")
    if not isinstance(key, str) or not key:
        raise PodAffinityError(f"{path}.topologyKey: required")
    selector = _selector(raw.get("labelSelector"), f"{path}.labelSelector")
    extra = []
    for field, op in (("matchLabelKeys", "In"), ("mismatchLabelKeys", "NotIn")):
        for i, k in enumerate(raw.get(field) or []):
            if not isinstance(k, str) or not k:
                raise PodAffinityError(f"{path}.{field}[{i}]: must be a label key")
            if raw.get("labelSelector") is None:
                raise PodAffinityError(f"{path}.{field}: needs a labelSelector")
            if k in labels:
                extra.append(Requirement(k, op, (str(labels[k]),)))
    if extra and not selector.nothing:
        selector = Selector(tuple(dict.fromkeys(selector.requirements + tuple(extra))))
    names = raw.get("namespaces") or []
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise PodAffinityError(f"{path}.namespaces: must be a list of names")
    ns_selector = raw.get("namespaceSelector")
    if ns_selector is not None and not isinstance(ns_selector, dict):
        raise PodAffinityError(f"{path}.namespaceSelector: must be an object")
    if ns_selector:  # selects namespaces by their labels, which the binder does not watch
        raise PodAffinityError(f"{path}.namespaceSelector: a non-empty selector "
                               + NOT_EVALUATED.format(fix="list the namespaces instead"))
    if ns_selector is not None:  # {}: every namespace
        spaces = None
    else:
        spaces = frozenset(names or [namespace])
    return AntiTerm(selector, spaces, key)


def _selector(raw: object, path: str) -> Selector:
    if raw is None:
        return NOTHING
    if not isinstance(raw, dict):
        raise PodAffinityError(f"{path}: must be an object")
    reqs = []
    match = raw.get("matchLabels") or {}
    if not isinstance(match, dict):
        raise PodAffinityError(f"{path}.matchLabels: must be a map of label to value")
    for k, v in sorted(match.items()):
        reqs.append(Requirement(str(k), "In", (str(v),)))
    for i, r in enumerate(raw.get("matchExpressions") or []):
        try:
            reqs.append(requirement(r, f"{path}.matchExpressions[{i}]", SELECTOR_OPERATORS))
        except NodeAffinityError as exc:  # the same field named, as this module's error
            raise PodAffinityError(str(exc)) from None
    return Selector(tuple(reqs))


def keep_apart(pods: list[tuple[str, Mapping[str, str], PodRules]]) -> set[str]:
    """The topology keys on which some two pods of one group (namespace, labels, rules)
    must not share a domain: one's term matches the other. Per distinct term, not per pair
    of pods: a group's pods mostly share their terms."""
    owners: dict[AntiTerm, set[int]] = {}
    for i, (_ns, _labels, rules) in enumerate(pods):
        for term in rules.anti:
            owners.setdefault(term, set()).add(i)
    keys: set[str] = set()
    for term, own in owners.items():
        if term.topology_key in keys:
            continue
        hit = {i for i, (ns, labels, _r) in enumerate(pods) if term.matches(ns, labels)}
        if len(hit) > 1 or len(own) > 1 and hit or hit - own:
            keys.add(term.topology_key)
    return keys


class Occupants:
    """The pods that occupy nodes (bound by anyone, or placed by this binder and being
    bound), kept by ClusterState as pods come and go, answering both checks per node:

    - `terms`: each required anti term of an occupant -> on which nodes (how many owners
      there), for the symmetric check (b);
    - `_watched`: each term an incoming pod asked about -> the nodes of the occupants it
      matches (how many there), for check (a). Worked out once when a term is first asked
      (a scan of its namespaces' occupants), then kept up to date as pods arrive and leave
      (each arrival is matched against the watched terms: a handful, one per template), so
      a Deployment's 1,000 replicas cost one scan, not one per replica; the least recently
      asked are forgotten past WATCHED.

    A group's check then costs the nodes its terms close, never a scan of every pod."""

    WATCHED = 256

    def __init__(self) -> None:
        self.node_of: dict[str, str] = {}
        self._who: dict[str, tuple[str, dict, tuple[AntiTerm, ...]]] = {}
        self._by_ns: dict[str, set[str]] = {}
        self.terms: dict[AntiTerm, dict[str, int]] = {}
        self._watched: OrderedDict[AntiTerm, dict[str, int]] = OrderedDict()

    def occupy(self, uid: str, node: str, pod: dict) -> bool:
        """`uid` is on `node` (again); False when nothing changed."""
        meta = pod.get("metadata") or {}
        ns, labels = meta.get("namespace") or "default", meta.get("labels") or {}
        old = self._who.get(uid)
        if old is not None and self.node_of[uid] == node and old[1] == labels and old[0] == ns:
            return False  # a status change (most events of a pod on a node)
        if old is not None:
            self.vacate(uid)
        terms: tuple[AntiTerm, ...] = ()
        if has_rules(pod):
            try:
                terms = pod_rules(pod).anti
            except PodAffinityError:
                pass  # bound in spite of it (by another scheduler): nothing to keep apart
        self.node_of[uid] = node
        self._who[uid] = (ns, labels, terms)  # an event's own dicts: never changed after
        self._by_ns.setdefault(ns, set()).add(uid)
        for t in terms:
            _count(self.terms.setdefault(t, {}), node, 1)
        for t, nodes in self._watched.items():
            if t.matches(ns, labels):
                _count(nodes, node, 1)
        return True

    def vacate(self, uid: str) -> bool:
        return self.vacate_terms(uid) is not None

    def vacate_terms(self, uid: str) -> tuple[AntiTerm, ...] | None:
        """`uid` left its node: its terms (None: it occupied none)."""
        who = self._who.pop(uid, None)
        if who is None:
            return None
        node = self.node_of.pop(uid)
        ns, labels, terms = who
        bucket = self._by_ns[ns]
        bucket.discard(uid)
        if not bucket:
            del self._by_ns[ns]
        for t in terms:
            if not _count(self.terms[t], node, -1):
                del self.terms[t]
        for t, nodes in self._watched.items():
            if t.matches(ns, labels):
                _count(nodes, node, -1)
        return terms

    def matching(self, term: AntiTerm) -> Collection[str]:
        """The nodes of the occupants `term` matches."""
        nodes = self._watched.get(term)
        if nodes is not None:
            self._watched.move_to_end(term)
            return nodes.keys()
        nodes = {}
        spaces = self._by_ns if term.namespaces is None else term.namespaces
        for ns in spaces:
            for uid in self._by_ns.get(ns, ()):
                if term.selector.matches(self._who[uid][1]):
                    _count(nodes, self.node_of[uid], 1)
        self._watched[term] = nodes
        if len(self._watched) > self.WATCHED:
            self._watched.popitem(last=False)
        return nodes.keys()

    def against(self, namespace: str, labels: Mapping[str, str],
                rules: PodRules) -> list[tuple[str, Collection[str], str]]:
        """Why nodes are closed to a pod: (topologyKey, nodes, reason), for the nodes of the
        occupants its own terms match (a) and those of occupants whose term matches it (b);
        the caller closes every node in the same domain (the key's label value)."""
        out = [(t.topology_key, self.matching(t), MISMATCH_INCOMING) for t in rules.anti]
        out.extend((t.topology_key, nodes.keys(), MISMATCH_EXISTING)
                   for t, nodes in self.terms.items() if t.matches(namespace, labels))
        return out


def _count(counts: dict[str, int], node: str, delta: int) -> int:
    """Add `delta` to `node`'s count (gone at 0); the counts left in `counts`."""
    n = counts.get(node, 0) + delta
    if n > 0:
        counts[node] = n
    else:
        counts.pop(node, None)
    return len(counts)
