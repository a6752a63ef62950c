"""`kubectl-fluxnode`: the kubectl plugin (``kubectl fluxnode queue|why|resources``; issue 30).

Design: installed as the console script ``kubectl-fluxnode`` (pyproject.toml), so kubectl
finds it on PATH and runs it with the words after ``kubectl fluxnode``. It talks only to the
API server, as the user: the official client's kubeconfig loading ($KUBECONFIG, else
~/.kube/config; ``--kubeconfig`` and ``--context`` as kubectl spells them), the namespace
from ``-n``, else the context's, else ``default``. argparse, not click, and the Kubernetes
client imported only once the arguments are good, so ``--help`` and bad input are quick.

``resources`` prints the leader's resource list as ``fluxnode resource list`` does, from
the ConfigMap fluxnode-resources the lead binder publishes it into
(scheduler/binder/resource_publisher.py says why an object and not the service proxy): in
the binder's namespace (``-n`` if given, else ``fluxnode``, not the context's: the list is
the cluster's), with how old it is on stderr, and what to check when it is missing or stale.

Exit status: 0 when it printed what was asked (a stale resource list too, with a warning),
1 with a one-line error otherwise.
"""

from __future__ import annotations

import argparse
import sys

from fluxnode.commands.kubectl_queue import HEADER, rows, table
from fluxnode.commands.kubectl_why import group_lines, job_lines, parse_target, pod_lines

GROUP, VERSION, PLURAL = "fluxnode.io", "v1alpha1", "fluxjobs"
BINDER_NAMESPACE = "fluxnode"  # where daemonset/binder.yaml puts the binder and its ConfigMap
RESOURCES_CONFIGMAP = "fluxnode-resources"


class PluginError(Exception):
    """A one-line error for the user."""


def _common(default) -> argparse.ArgumentParser:
    """kubectl's connection flags; before or after the command (a subcommand's parser
    leaves them unset, not None, so it keeps what was given before it)."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--kubeconfig", default=default, help="the kubeconfig file "
                        "(default: $KUBECONFIG, else ~/.kube/config)")
    common.add_argument("--context", default=default, help="the kubeconfig context to use")
    common.add_argument("-n", "--namespace", default=default,
                        help="the namespace (default: the context's)")
    return common


def _parser() -> argparse.ArgumentParser:
    common = _common(argparse.SUPPRESS)
    parser = argparse.ArgumentParser(prog="kubectl fluxnode", parents=[_common(None)],
                                     description="fluxnode's queue as the API server holds it.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    queue = sub.add_parser("queue", parents=[common],
                           help="the FluxJob objects as the ordered queue")
    queue.add_argument("-A", "--all-namespaces", action="store_true",
                       help="every namespace's FluxJobs")
    why = sub.add_parser("why", parents=[common],
                         help="why a Job or a pod is where it is")
    why.add_argument("target", metavar="JOB|POD", help="NAME, job/NAME or pod/NAME")
    resources = sub.add_parser(
        "resources", parents=[common],
        help="the leader's resource list, as `fluxnode resource list` prints it",
        description="The leader's resource list as the lead binder last published it (the "
        f"ConfigMap {RESOURCES_CONFIGMAP} in the binder's namespace: -n, else "
        f"{BINDER_NAMESPACE}); its age is said on stderr.")
    resources.add_argument("-s", "--states", default="free,allocated,down",
                           help="comma list of states: free, allocated, down, up, all "
                           "(default: %(default)s)")
    resources.add_argument("--no-header", action="store_true", help="suppress the header")
    return parser


def _client(args):
    from kubernetes import client, config

    try:
        api = config.new_client_from_config(config_file=args.kubeconfig, context=args.context)
        namespace = args.namespace
        if not namespace:
            contexts, current = config.list_kube_config_contexts(config_file=args.kubeconfig)
            chosen = next((c for c in contexts if c.get("name") == args.context), current) \
                if args.context else current
            namespace = ((chosen or {}).get("context") or {}).get("namespace") or "default"
    except (config.ConfigException, OSError, TypeError, ValueError) as exc:
        raise PluginError(f"cannot load the kubeconfig: {exc}") from None
    return client, api, namespace


def _call(what: str, fn, *a, **kw):
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError

    from fluxnode.agent.kube import raw
    from fluxnode.agent.kube.api_client import status_message

    try:
        return raw.call(fn, *a, **kw)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise PluginError(f"cannot {what}: {status_message(exc)}") from None
    except HTTPError as exc:
        raise PluginError(f"cannot {what}: the API server did not answer ({exc})") from None


def queue(args) -> str:
    client, api, namespace = _client(args)
    custom = client.CustomObjectsApi(api)
    if args.all_namespaces:
        got = _call("list FluxJobs", custom.list_cluster_custom_object, GROUP, VERSION, PLURAL)
    else:
        got = _call(f"list FluxJobs in namespace {namespace}",
                    custom.list_namespaced_custom_object, GROUP, VERSION, namespace, PLURAL)
    if got is None:
        raise PluginError("the FluxJob CRD (fluxjobs.fluxnode.io) is not installed: "
                          "kubectl apply -k daemonset/workloads/")
    body = rows(got.get("items") or [])
    if not body:
        return "no FluxJobs" + ("" if args.all_namespaces else f" in namespace {namespace}")
    return table(HEADER, body)


def why(args) -> str:
    try:
        kind, name = parse_target(args.target)
    except ValueError as exc:
        raise PluginError(str(exc)) from None
    client, api, namespace = _client(args)
    core = client.CoreV1Api(api)
    if kind in (None, "job"):
        job = _call(f"read Job {namespace}/{name}", client.BatchV1Api(api).read_namespaced_job,
                    name, namespace)
        if job is not None:
            fluxjob = _call(f"read FluxJob {namespace}/{name}",
                            client.CustomObjectsApi(api).get_namespaced_custom_object,
                            GROUP, VERSION, namespace, PLURAL, name)
            pods = _call(f"list the pods of Job {namespace}/{name}",
                         core.list_namespaced_pod, namespace,
                         label_selector=f"batch.kubernetes.io/job-name={name}")
            return "\n".join(job_lines(namespace, name, fluxjob, job,
                                       (pods or {}).get("items") or []))
        if kind == "job":
            raise PluginError(f"no Job {name!r} in namespace {namespace}")
    pod = _call(f"read pod {namespace}/{name}", core.read_namespaced_pod, name, namespace)
    if pod is None:
        raise PluginError(f"no Job or pod {name!r} in namespace {namespace}" if kind is None
                          else f"no pod {name!r} in namespace {namespace}")
    events = _call(f"list the Events of namespace {namespace}",
                   core.list_namespaced_event, namespace)
    # imported here: help and usage errors stay free of the binder's modules
    from fluxnode.scheduler.binder.podgroup import (
        PodGroupError,
        group_of,
        is_declared_group,
        record_name,
    )

    group = None
    try:
        key = group_of(pod).key
    except PodGroupError:
        key = None
    if key is not None and is_declared_group(key):
        record = record_name(key)
        fluxjob = _call(f"read FluxJob {namespace}/{record}",
                        client.CustomObjectsApi(api).get_namespaced_custom_object,
                        GROUP, VERSION, namespace, PLURAL, record)
        group = group_lines(f"{namespace}/{key.name}", record, fluxjob)
    return "\n".join(pod_lines(namespace, name, pod, (events or {}).get("items") or [],
                                group))


def age_text(seconds: float) -> str:
    """An age in short words: 45s, 3m12s (under 10 minutes), 42m, 2h5m, 3d4h."""
    s = int(seconds)
    if s < 120:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60}s" if s < 600 else f"{s // 60}m"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60}m"
    return f"{s // 86400}d{s % 86400 // 3600}h"


def _binder_checks(namespace: str) -> str:
    return (f"is a binder running and holding its Lease (kubectl -n {namespace} get pods -l "
            f"app.kubernetes.io/component=binder; kubectl -n {namespace} get lease "
            f"fluxnode-binder), and does it reach the leader, rank 0 (kubectl -n {namespace} "
            "logs deploy/fluxnode-binder: 'scheduler service unavailable')?")


def resources(args) -> tuple[str, str]:
    """(the table, the note on stderr)."""
    import click

    from fluxnode.commands.resource import STATES, list_rows
    from fluxnode.scheduler.binder.queue import rfc3339
    from fluxnode.scheduler.binder.resource_publisher import RecordError, ResourceRecord

    wanted = tuple(s.strip() for s in args.states.split(",") if s.strip())
    bad = [s for s in wanted if s not in STATES]
    if bad or not wanted:
        raise PluginError(f"--states: unknown state {bad[0] if bad else args.states!r} "
                          f"(known: {', '.join(STATES)})")
    client, api, _ = _client(args)
    namespace = args.namespace or BINDER_NAMESPACE
    where = f"ConfigMap {namespace}/{RESOURCES_CONFIGMAP}"
    try:
        cm = _call(f"read {where}", client.CoreV1Api(api).read_namespaced_config_map,
                   RESOURCES_CONFIGMAP, namespace)
    except PluginError as exc:
        if "forbidden" in str(exc).lower():
            raise PluginError(f"{exc} (a Role fluxnode-resources-reader in {namespace} grants "
                              f"it: kubectl -n {namespace} create rolebinding NAME "
                              "--role=fluxnode-resources-reader --user=YOU)") from None
        raise
    if cm is None:
        raise PluginError(f"no {where}: the binder's manifests create it (kubectl apply -k "
                          "daemonset/); a binder in another namespace? use -n NAMESPACE")
    try:
        record = ResourceRecord.from_data(cm.get("data"), cm.get("binaryData"))
    except RecordError as exc:
        raise PluginError(f"{where} is not a resource list: {exc}") from None
    if record is None:
        raise PluginError(f"no resource list in {where} yet: the lead binder writes it within "
                          f"seconds of taking the Lease; {_binder_checks(namespace)}")
    try:
        rows = list_rows(record.listing, wanted, header=not args.no_header)
    except click.UsageError as exc:
        raise PluginError(exc.format_message()) from None
    by = f" by {record.published_by}" if record.published_by else ""
    note = (f"as the leader listed it {age_text(record.age())} ago "
            f"({rfc3339(record.taken_at)}{by})")
    if record.stale():
        note = (f"warning: stale: taken {age_text(record.age())} ago, but the lead binder "
                f"refreshes it every {record.refresh:g}s; {_binder_checks(namespace)}")
    return "\n".join(rows), note


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "resources":
            out, note = resources(args)
            print(out)
            print(note, file=sys.stderr)
            return 0
        out = {"queue": queue, "why": why}[args.command](args)
    except PluginError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
