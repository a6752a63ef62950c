"""pod_affinity.py's rules on their own: which terms match which pods, which group pods must
keep apart, and the occupants index that answers both checks without a scan."""

import pytest
from fluxnode.scheduler.binder.pod_affinity import (
    HOSTNAME,
    MISMATCH_EXISTING,
    MISMATCH_INCOMING,
    NONE,
    Occupants,
    PodAffinityError,
    keep_apart,
    pod_rules,
)


def pod(name: str, labels: dict, terms: list | None = None, ns: str = "default") -> dict:
    spec: dict = {}
    if terms is not None:
        spec["affinity"] = {"podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": terms}}
    return {"metadata": {"name": name, "namespace": ns, "labels": labels}, "spec": spec}


def term(match: dict | None, key: str = HOSTNAME, **extra) -> dict:
    out = {"topologyKey": key, **extra}
    if match is not None:
        out["labelSelector"] = {"matchLabels": match}
    return out


def test_terms_match_by_selector_and_namespace_as_kube_scheduler_does():
    own = pod_rules(pod("a", {}, [term({"app": "db"})])).anti[0]
    assert own.matches("default", {"app": "db", "x": "y"})
    assert not own.matches("other", {"app": "db"})  # none given: the pod's own namespace
    listed = pod_rules(pod("a", {}, [term({"app": "db"}, namespaces=["other"])])).anti[0]
    assert listed.matches("other", {"app": "db"}) and not listed.matches("default", {"app": "db"})
    every = pod_rules(pod("a", {}, [term({"app": "db"}, namespaceSelector={})])).anti[0]
    assert every.matches("anything", {"app": "db"})
    nothing = pod_rules(pod("a", {}, [term(None)])).anti[0]  # no labelSelector: matches none
    assert not nothing.matches("default", {})
    everything = pod_rules(pod("a", {}, [{"topologyKey": HOSTNAME, "labelSelector": {}}])).anti[0]
    assert everything.matches("default", {"any": "pod"})
    # matchLabelKeys: the owner's value of that key joins the selector
    keyed = pod_rules(pod("a", {"rev": "2"}, [term({"app": "w"}, matchLabelKeys=["rev"])])).anti[0]
    assert keyed.matches("default", {"app": "w", "rev": "2"})
    assert not keyed.matches("default", {"app": "w", "rev": "1"})
    assert pod_rules(pod("plain", {"app": "w"})) is NONE


@pytest.mark.parametrize("spec,words", [
    ({"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {}}}},
     "must be a list of terms"),
    ({"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchExpressions": [{"key": "a", "operator": "In"}]},
         "topologyKey": HOSTNAME}]}}}, "matchExpressions[0].values: must be non-empty for In"),
    ({"topologySpreadConstraints": [{"whenUnsatisfiable": "Sometimes"}]},
     "topologySpreadConstraints[0].whenUnsatisfiable: 'Sometimes' is not DoNotSchedule or "
     "ScheduleAnyway"),
])
def test_malformed_rules_name_the_field(spec, words):
    with pytest.raises(PodAffinityError, match=words.replace("[", r"\[").replace("]", r"\]")):
        pod_rules({"metadata": {"name": "p"}, "spec": spec})


def test_group_pods_keep_apart_only_when_one_matches_another():
    web = pod_rules(pod("w", {"app": "web"}, [term({"app": "web"})]))
    alone = [("default", {"app": "web"}, web)]
    assert keep_apart(alone) == set()  # a pod matching its own term is no pair
    assert keep_apart(alone * 2) == {HOSTNAME}  # two alike: apart
    other = [("default", {"app": "web"}, web), ("default", {"app": "db"}, NONE)]
    assert keep_apart(other) == set()
    # one-sided is enough: the db pod's term matches the web pod
    hater = pod_rules(pod("d", {"app": "db"}, [term({"app": "web"}, key="zone")]))
    assert keep_apart([("default", {"app": "web"}, NONE),
                       ("default", {"app": "db"}, hater)]) == {"zone"}


def closed(occ: Occupants, ns: str, labels: dict, rules) -> list[tuple[str, str, str]]:
    return sorted((key, node, why) for key, nodes, why in occ.against(ns, labels, rules)
                  for node in nodes)


def test_occupants_answer_both_checks_and_forget_pods_that_leave():
    occ = Occupants()
    occ.occupy("db1", "n0", pod("db1", {"app": "db"}))
    occ.occupy("db2", "n1", pod("db2", {"app": "db"}, ns="other"))
    occ.occupy("quiet", "n2", pod("quiet", {}, [term({"role": "noisy"})]))
    hater = pod_rules(pod("h", {"role": "noisy"}, [term({"app": "db"})]))
    assert closed(occ, "default", {"role": "noisy"}, hater) == [
        (HOSTNAME, "n0", MISMATCH_INCOMING), (HOSTNAME, "n2", MISMATCH_EXISTING)]
    assert occ.against("default", {"role": "calm"}, NONE) == []
    # the term asked about is kept up to date: pods that arrive, move and leave
    occ.occupy("db3", "n3", pod("db3", {"app": "db"}))
    occ.occupy("db3", "n3", pod("db3", {"app": "db"}))  # a status change: nothing moves
    assert closed(occ, "default", {}, hater) == [(HOSTNAME, "n0", MISMATCH_INCOMING),
                                                 (HOSTNAME, "n3", MISMATCH_INCOMING)]
    occ.occupy("db1", "n0", pod("db1", {"app": "cache"}))  # relabelled
    occ.vacate("db3")
    occ.vacate("quiet")
    assert closed(occ, "default", {"role": "noisy"}, hater) == []
    assert occ.terms == {}
    # two owners of one term on one node: the node stays closed until both leave
    for uid in ("q1", "q2"):
        occ.occupy(uid, "n5", pod(uid, {}, [term({"role": "noisy"})]))
    occ.vacate("q1")
    assert closed(occ, "default", {"role": "noisy"}, NONE) == [
        (HOSTNAME, "n5", MISMATCH_EXISTING)]
    # a watched term agrees with a fresh scan after all that
    fresh = Occupants()
    fresh.occupy("db2", "n1", pod("db2", {"app": "db"}, ns="other"))
    fresh.occupy("db1", "n0", pod("db1", {"app": "cache"}))
    fresh.occupy("q2", "n5", pod("q2", {}, [term({"role": "noisy"})]))
    assert closed(fresh, "default", {"role": "noisy"}, hater) == \
        closed(occ, "default", {"role": "noisy"}, hater)
