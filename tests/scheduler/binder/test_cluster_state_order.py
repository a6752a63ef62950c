import random

from fluxnode.broker_conf import hostlist
from fluxnode.scheduler.binder.cluster_state import hostlist_order


def test_numbered_names_sort_numerically_so_the_hostlist_is_compact():
    names = [f"sim{i}" for i in range(5000)] + ["a", "b1c2", "node01", "node1", "ip-10-0-1-23"]
    random.Random(1).shuffle(names)
    ordered = sorted(names, key=hostlist_order)
    assert hostlist.encode(ordered) == "a,b1c2,ip-10-0-1-23,node01,node1,sim[0-4999]"
    # same members, and a total order (equal numbers with different padding still differ)
    assert sorted(ordered) == sorted(names)
    assert sorted(["n01", "n1", "n001"], key=hostlist_order) == ["n001", "n01", "n1"]
