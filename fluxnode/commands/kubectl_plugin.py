"""`kubectl-fluxnode`: the kubectl plugin (``kubectl fluxnode queue|why``; issue 30).

Design: installed as the console script ``kubectl-fluxnode`` (pyproject.toml), so kubectl
finds it on PATH and runs it with the words after ``kubectl fluxnode``. It talks only to the
API server, as the user: the official client's kubeconfig loading ($KUBECONFIG, else
~/.kube/config; ``--kubeconfig`` and ``--context`` as kubectl spells them), the namespace
from ``-n``, else the context's, else ``default``. argparse, not click, and the Kubernetes
client imported only once the arguments are good, so ``--help`` and bad input are quick.

``resources`` (the leader's resource list) is not here: nothing the binder or the node
agents write is readable through the API server yet (the agents' ConfigMap holds the rank
map only), and the plugin needs no shell on a node by design.

Exit status: 0 when it printed what was asked, 1 with a one-line error otherwise.
"""

from __future__ import annotations

import argparse
import sys

from fluxnode.commands.kubectl_queue import HEADER, rows, table
from fluxnode.commands.kubectl_why import group_lines, job_lines, parse_target, pod_lines

GROUP, VERSION, PLURAL = "fluxnode.io", "v1alpha1", "fluxjobs"


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


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        out = {"queue": queue, "why": why}[args.command](args)
    except PluginError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
