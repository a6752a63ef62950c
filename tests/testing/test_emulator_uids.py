"""The uids the emulator gives objects are what a real API server gives: random version 4
UUIDs of the RFC 4122 variant in their canonical text (the apiserver's uuid.NewUUID, which
is google/uuid's NewRandom), never two alike. Read through the official client and parsed
by the standard library's `uuid`, which shares nothing with the emulator's formatting."""

from __future__ import annotations

import uuid

from kubernetes.client import V1ConfigMap, V1ObjectMeta

COUNT = 300


def test_created_objects_get_canonical_random_v4_uids(core):
    uids = []
    for i in range(COUNT):
        made = core.create_namespaced_config_map(
            "default", V1ConfigMap(metadata=V1ObjectMeta(generate_name="uid-"), data={"i": str(i)})
        )
        uids.append(made.metadata.uid)
    for text in uids:
        parsed = uuid.UUID(text)
        assert parsed.version == 4, text
        assert parsed.variant == uuid.RFC_4122, text
        assert str(parsed) == text  # 8-4-4-4-12 lowercase hex, as Go's uuid.String()
    assert len(set(uids)) == COUNT
    # random, not a counter: over 300 uids every hex digit of the random part takes many
    # values (a fixed or sequential field would take one or a few)
    for position in (0, 7, 9, 15, 20, 35):
        assert len({u[position] for u in uids}) >= 10, position
    listed = {c.metadata.name: c.metadata.uid for c in
              core.list_namespaced_config_map("default").items}
    assert sorted(listed.values()) == sorted(uids)
