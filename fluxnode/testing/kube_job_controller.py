"""The Job controller, for tests that need batch/v1 Jobs to make pods (off unless asked for:
``KubeEmulator(job_controller=True)`` or ``kube.start_job_controller()``).

It does what kube-controller-manager's pkg/controller/job/job_controller.go does for the
Jobs fluxnode's workloads use, as a client of the API: it reads the store (its informer
cache) and writes through the emulator's API handler as
``system:serviceaccount:kube-system:job-controller`` (in process, the same requests without
the socket and TLS: kube_local_client), so its pods go through authorization, admission
webhooks and validation like any other client's. On each change of a Job or of a pod it
controls (``syncJob``):

- pods are counted from their phase (active: neither Succeeded nor Failed and not being
  deleted; ``ready``: active with the Ready condition; ``terminating``: being deleted);
- not suspended, active pods beyond ``parallelism`` (or the completions still missing)
  are deleted, those not on a node, Pending, not Ready, restarted more or newer first, and
  for Indexed first the pods of a duplicated or out-of-range index (``manageJob``,
  ``activePodsForRemoval``); otherwise pods are created from the template up to
  ``parallelism`` and the completions still missing, named ``JOB-xxxxx``, or
  ``JOB-INDEX-xxxxx`` for ``completionMode: Indexed``, the lowest missing indexes first;
  each carries the template's labels (the API server added ``batch.kubernetes.io/controller-uid``,
  ``batch.kubernetes.io/job-name``, ``controller-uid``, ``job-name``), the controller
  ownerReference, and for Indexed the ``batch.kubernetes.io/job-completion-index`` annotation
  and label, the ``JOB_COMPLETION_INDEX`` variable and the hostname ``JOB-INDEX``
  (utils.go, indexed_job_utils.go); ``startTime`` is set when the Job starts or resumes;
- suspended, its active pods are deleted and it gets ``Suspended`` (``JobSuspended``; on
  resume False, ``JobResumed``);
- a failed pod is replaced only after the pod failure backoff (backoff_utils.go,
  ``newBackoffRecord`` and ``getRemainingTimeForFailuresCount``; manageJob creates nothing
  while it runs and requeues the Job, ``enqueueControllerDelayed``): 10 s
  (``DefaultJobPodFailureBackOff``) for one failure since the last success, doubled for
  each further one, capped at 6 min (``MaxJobPodFailureBackOff``), counted from the last
  failure's finish time (``getFinishedTime``: the containers' ``finishedAt``, else the
  Ready=False condition's lastTransitionTime, else the deletion time less its grace, else
  the pod's creation); a new success resets the count to the failures finished after it.
  Both are settable (``KubeEmulator(job_backoff=, job_max_backoff=)``,
  ``start_job_controller(backoff=, max_backoff=)``, or ``JobController.backoff``) for tests
  that only care that a pod is replaced; the defaults are the real ones. The record is in
  memory, as the controller's ``podBackoffStore``: a new controller starts without it;
- ``podReplacementPolicy: Failed`` (the API's default with a podFailurePolicy): no pod is
  created in place of one still terminating (onlyReplaceFailedPods; for Indexed, its index
  waits for it);
- ``podFailurePolicy`` (pod_failure_policy.go matchPodFailurePolicy): each failed pod is
  matched against the rules in order, the first match decides: ``onExitCodes`` (the
  terminated containers, then init containers, with a non-zero exit code; ``containerName``,
  ``In`` / ``NotIn``), ``onPodConditions`` (type and status, e.g. the eviction's
  ``DisruptionTarget``); ``Ignore`` leaves the failure out of ``status.failed`` and of
  ``backoffLimit`` (not of the backoff delay: newBackoffRecord counts every new failure),
  ``Count`` counts it as without a policy, ``FailJob`` fails the Job: ``FailureTarget``
  with reason ``PodFailurePolicy`` and the message "Container C for pod NS/P failed with
  exit code N matching FailJob rule at index I" (or "Pod NS/P has condition T matching
  FailJob rule at index I"), the active pods deleted, ``Failed`` once they are gone. The
  API's validation of the policy is kube_job_validation's;
- ``backoffLimitPerIndex`` (Indexed; the Job's own ``backoffLimit`` then defaults to
  MaxInt32): each new pod carries its index's failures before it
  (``batch.kubernetes.io/job-index-failure-count``, and ``job-index-ignored-failure-count``
  for those an Ignore rule matched: addIndexFailureCountAnnotation); an index whose failed
  pod had as many counted failures before it as the limit, or whose pod a ``FailIndex``
  rule matched, is failed (isIndexFailed; ``status.failedIndexes``) and not made again;
  each index waits for its own backoff, from its last failed pod's counts
  (getRemainingTimePerIndex), not the Job's; more failed indexes than ``maxFailedIndexes``:
  ``MaxFailedIndexesExceeded``, or every index failed or succeeded with one failed:
  ``FailedIndexes``, each through ``FailureTarget`` as below. ``completedIndexes`` and
  ``failedIndexes`` are written as orderedIntervals.String does (``0,1,3-5``);
- more failed pods than ``backoffLimit``: ``FailureTarget`` and the active pods deleted,
  then ``Failed`` (``BackoffLimitExceeded``) once none is left; the same with
  ``DeadlineExceeded`` once the Job has run ``activeDeadlineSeconds`` since its
  ``startTime`` (``pastActiveDeadline``: never while suspended, and a resume sets a new
  ``startTime``), the Job synced again when that time comes (the controller's
  ``queue.AddAfter``, one timer per Job for the deadline and the backoff: the earlier
  wins, as in client-go's delaying queue); a ``FailureTarget`` once set goes on to
  ``Failed`` whatever else changes (``newFailedConditionForFailureTarget``); enough
  succeeded pods (``completions``, every index for Indexed, or one for a work queue):
  ``SuccessCriteriaMet`` then ``Complete`` (``CompletionsReached``) with ``completionTime``
  (the terminal conditions wait for the pods, as with JobManagedBy since 1.32).

Not emulated (documented, never guessed): the ``batch.kubernetes.io/job-tracking``
finalizer (the controller remembers which finished pods it counted instead),
``successPolicy``, what the controller does with another active pod of an index that
failed (an index has one pod at a time here; such a pod is left running),
``ttlSecondsAfterFinished``, the controller's Events (``DeadlineExceeded`` and the others).
A Job deleted through the API has its pods collected as the garbage collector would
(`JobController.collect`): orphaned (their ownerReference removed) by default, deleted for
``propagationPolicy`` Background or Foreground (kubectl's ``delete job`` sends Background).
"""

from __future__ import annotations

import datetime
import queue
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from fluxnode.testing.kube_local_client import LocalApiError, LocalClient
from fluxnode.testing.kube_store import Change, KubeStore
from fluxnode.testing.kube_types import ApiError

USER = "system:serviceaccount:kube-system:job-controller"
# the pod failure backoff's first delay and its cap, in seconds (job_controller.go
# DefaultJobPodFailureBackOff, MaxJobPodFailureBackOff)
DEFAULT_BACKOFF = 10.0
MAX_BACKOFF = 360.0
INDEX = "batch.kubernetes.io/job-completion-index"
# backoffLimitPerIndex: the failures of the pod's index before it, counted and ignored
FAILURE_COUNT = "batch.kubernetes.io/job-index-failure-count"
IGNORED_COUNT = "batch.kubernetes.io/job-index-ignored-failure-count"


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _stamp(value: str | None) -> float | None:
    """An RFC 3339 time of the API (whole seconds, or with a fraction) as epoch seconds."""
    if not value:
        return None
    stamp = datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
    return stamp.timestamp()


def _finished_time(pod: dict) -> float:
    """When a finished pod finished (backoff_utils.go getFinishedTime): the latest
    ``finishedAt`` of its containers when every container says one, else the
    lastTransitionTime of its Ready=False condition, else its deletionTimestamp less its
    grace period, else its creationTimestamp (a pod no kubelet reported on: the emulator's
    ``set_pod_phase`` writes only the phase)."""
    status = pod.get("status") or {}
    latest: float | None = None
    for container in status.get("containerStatuses") or []:
        finished = _stamp(((container.get("state") or {}).get("terminated") or {}).get(
            "finishedAt"))
        if finished is None:
            latest = None
            break
        latest = finished if latest is None else max(latest, finished)
    if latest is not None:
        return latest
    for c in status.get("conditions") or []:
        if c.get("type") == "Ready" and c.get("status") == "False" and \
                (at := _stamp(c.get("lastTransitionTime"))) is not None:
            return at
    meta = pod["metadata"]
    deleted = _stamp(meta.get("deletionTimestamp"))
    if deleted is not None:
        return deleted - float(meta.get("deletionGracePeriodSeconds") or 0)
    return _stamp(meta.get("creationTimestamp")) or time.time()


@dataclass(frozen=True)
class Backoff:
    """A Job's pod failure backoff (backoff_utils.go backoffRecord): the failures since the
    last success, the time of the last of them, and (the emulator's stand-in for the
    ``batch.kubernetes.io/job-tracking`` finalizer) the uids of the finished pods already
    taken into account, so a sync tells a new failure from one it counted before."""

    failures: int = 0
    last_failure: float | None = None
    counted: frozenset[str] = field(default_factory=frozenset)

    def after(self, succeeded: list[dict], failed: list[dict]) -> Backoff:
        """The record once the pods newly finished are counted (newBackoffRecord): a new
        success resets the count to the failures that finished after the last success."""
        new_ok = sorted((p for p in succeeded if p["metadata"]["uid"] not in self.counted),
                        key=_finished_time)
        new_failed = sorted((p for p in failed if p["metadata"]["uid"] not in self.counted),
                            key=_finished_time)
        present = {p["metadata"]["uid"] for p in succeeded + failed}
        counted = frozenset(present)  # (the uids of pods gone are forgotten)
        if not new_ok and not new_failed:
            return self if counted == self.counted else Backoff(
                self.failures, self.last_failure, counted)
        if not new_ok:
            return Backoff(self.failures + len(new_failed), _finished_time(new_failed[-1]),
                           counted)
        last_ok = _finished_time(new_ok[-1])
        after = [t for p in new_failed if (t := _finished_time(p)) > last_ok]
        return Backoff(len(after), max(after) if after else None, counted)

    def remaining(self, base: float, cap: float, now: float | None = None) -> float:
        """Seconds before pods may be created again (getRemainingTimeForFailuresCount): the
        delay is `base` for one failure, doubled for each further one up to `cap`, counted
        from the last failure; 0 once it has passed or with no failure."""
        if self.failures == 0 or self.last_failure is None:
            return 0.0
        delay = base
        for _ in range(1, self.failures):
            delay *= 2
            if delay >= cap:
                delay = cap
                break
        elapsed = (time.time() if now is None else now) - self.last_failure
        return 0.0 if delay < elapsed else delay - elapsed


def _exit_code(statuses: list[dict] | None, requirement: dict) -> tuple[str, int] | None:
    """The first terminated container of `statuses` whose non-zero exit code the rule's
    onExitCodes matches (getMatchingContainerFromList): (its name, its exit code)."""
    name = requirement.get("containerName")
    values = requirement.get("values") or []
    for container in statuses or []:
        terminated = (container.get("state") or {}).get("terminated")
        if terminated is None or (name is not None and container.get("name") != name):
            continue
        code = int(terminated.get("exitCode") or 0)
        if code == 0:
            continue
        operator = requirement.get("operator")
        if (operator == "In" and code in values) or (operator == "NotIn" and
                                                     code not in values):
            return container.get("name", ""), code
    return None


def _failure_action(policy: dict, pod: dict) -> tuple[str | None, str]:
    """The action of the first podFailurePolicy rule a failed pod matches
    (pod_failure_policy.go matchPodFailurePolicy: onExitCodes over the containers then the
    init containers, onPodConditions over the pod's conditions), with the Job's failure
    message for FailJob; (None, "") when none matches (the failure is counted)."""
    status = pod.get("status") or {}
    where = f"{pod['metadata'].get('namespace', '')}/{pod['metadata']['name']}"
    for i, rule in enumerate(policy.get("rules") or []):
        action = rule.get("action")
        if rule.get("onExitCodes") is not None:
            found = _exit_code(status.get("containerStatuses"), rule["onExitCodes"]) or \
                _exit_code(status.get("initContainerStatuses"), rule["onExitCodes"])
            if found is None:
                continue
            message = (f"Container {found[0]} for pod {where} failed with exit code "
                       f"{found[1]} matching {action} rule at index {i}")
        elif rule.get("onPodConditions"):
            matched = next((c for c in status.get("conditions") or []
                            for want in rule["onPodConditions"]
                            if c.get("type") == want.get("type")
                            and c.get("status") == want.get("status", "True")), None)
            if matched is None:
                continue
            message = (f"Pod {where} has condition {matched.get('type')} matching {action} "
                       f"rule at index {i}")
        else:
            continue
        if action in ("Ignore", "Count", "FailJob", "FailIndex"):
            return action, message
    return None, ""


def _apply_failure_policy(policy: dict | None,
                          failed: list[dict]) -> tuple[list[dict], str | None]:
    """The failed pods counted (all but those an Ignore rule matched) and the message of the
    first a FailJob rule matched, if any."""
    if not policy:
        return failed, None
    counted: list[dict] = []
    fail_job: str | None = None
    for pod in failed:
        action, message = _failure_action(policy, pod)
        if action == "Ignore":
            continue
        counted.append(pod)
        if action == "FailJob" and fail_job is None:
            fail_job = message
    return counted, fail_job


def _per_index(spec: dict, status: dict, failed: list[dict], active: list[dict],
               done: set[int]) -> tuple[set[int], dict[int, dict]]:
    """backoffLimitPerIndex: the failed indexes (calculateFailedIndexes: those of the status
    and of each failed pod a FailIndex rule matched or whose counted failures reach the
    limit, isIndexFailed), and the last failed pod of each index still to be made again
    (getPodsWithDelayedDeletionPerIndex: the most failures, then the latest)."""
    completions = int(spec.get("completions") or 0)
    limit = int(spec["backoffLimitPerIndex"])
    policy = spec.get("podFailurePolicy")
    failed_indexes = _parse_intervals(status.get("failedIndexes") or "", completions)
    for pod in failed:
        index = _index(pod)
        if index is None or index >= completions:
            continue
        action = _failure_action(policy, pod)[0] if policy else None
        if action == "FailIndex" or (action != "Ignore" and
                                     _annotation_count(pod, FAILURE_COUNT) >= limit):
            failed_indexes.add(index)
    busy = done | failed_indexes | {_index(p) for p in active}
    last: dict[int, dict] = {}
    for pod in failed:
        index = _index(pod)
        if index is None or index >= completions or index in busy:
            continue
        known = last.get(index)
        if known is None or (_absolute_failures(known) <= _absolute_failures(pod) and
                             _finished_time(pod) >= _finished_time(known)):
            last[index] = pod
    return failed_indexes, last


def _failure_counts(policy: dict | None, replaced: dict | None) -> tuple[int, int]:
    """The failure counts a new pod of an index carries (getNewIndexFailureCounts): those of
    the pod it replaces plus that pod's own failure, counted or (an Ignore rule) ignored."""
    if replaced is None:
        return 0, 0
    counted = _annotation_count(replaced, FAILURE_COUNT)
    ignored = _annotation_count(replaced, IGNORED_COUNT)
    if policy and _failure_action(policy, replaced)[0] == "Ignore":
        return counted, ignored + 1
    return counted + 1, ignored


def _deadline_left(spec: dict, status: dict) -> float | None:
    """Seconds until the Job's active deadline (<= 0: past it, pastActiveDeadline), or None
    when it has none, no startTime yet, or is suspended. ``startTime`` has whole seconds,
    as the controller reads it from its informer."""
    deadline = spec.get("activeDeadlineSeconds")
    start = status.get("startTime")
    if deadline is None or not start or spec.get("suspend"):
        return None
    return float(deadline) - (time.time() - _stamp(start))


def _pods_path(namespace: str, name: str = "") -> str:
    return f"/api/v1/namespaces/{namespace}/pods" + (f"/{name}" if name else "")


def _owner(pod: dict) -> tuple[str, str] | None:
    """(job name, job uid) of the Job controlling a pod."""
    for ref in (pod.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("controller") and ref.get("kind") == "Job" and \
                ref.get("apiVersion") == "batch/v1":
            return ref.get("name", ""), ref.get("uid", "")
    return None


def _counted(pod: dict) -> tuple[Any, ...]:
    """What a sync reads of a pod besides its owner: its phase, whether it is being
    deleted, its completion index, whether it is Ready."""
    return ((pod.get("status") or {}).get("phase"), pod["metadata"].get("deletionTimestamp"),
            _index(pod), _ready(pod))


def _condition(job: dict, type_: str) -> dict | None:
    return next((c for c in (job.get("status") or {}).get("conditions") or []
                 if c.get("type") == type_), None)


def _true(job: dict, type_: str) -> bool:
    found = _condition(job, type_)
    return found is not None and found.get("status") == "True"


def _index(pod: dict) -> int | None:
    value = ((pod["metadata"].get("annotations") or {}).get(INDEX))
    return int(value) if value is not None and value.isdigit() else None


_PHASE_ORDINAL = {"Pending": 0, "Unknown": 1, "Running": 2}


def _ready(pod: dict) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (pod.get("status") or {}).get("conditions") or [])


def _removal_order(pods: list[dict]) -> list[dict]:
    """`pods` the first to delete first (controller_utils.go ActivePods): not on a node
    before on one, Pending before Unknown before Running, not Ready before Ready, more
    container restarts before fewer, newer before older (creationTimestamp; equal ones keep
    their order). How long a pod has been Ready is not compared (its condition's
    lastTransitionTime: the emulator's pods become Ready when a test says so)."""
    def key(pod: dict) -> tuple:
        status = pod.get("status") or {}
        restarts = sum(int(c.get("restartCount") or 0)
                       for c in status.get("containerStatuses") or [])
        return (bool((pod.get("spec") or {}).get("nodeName")),
                _PHASE_ORDINAL.get(status.get("phase") or "", 0), _ready(pod), -restarts)
    by_age = sorted(pods, key=lambda p: p["metadata"].get("creationTimestamp") or "",
                    reverse=True)  # newer first (stable: equal stamps keep their order)
    return sorted(by_age, key=key)


def _for_removal(active: list[dict], at_least: int, completions: int | None) -> list[dict]:
    """The active pods to delete (job_controller.go activePodsForRemoval): for an Indexed
    Job (`completions` given) every pod whose index is missing or not below completions and,
    of pods sharing an index, all but the one to keep longest; then, until `at_least` are
    chosen, the others in `_removal_order`."""
    rm: list[dict] = []
    left = active
    if completions is not None:
        left = []
        by_index: dict[int, list[dict]] = {}
        for pod in active:
            index = _index(pod)
            if index is None or index >= completions:
                rm.append(pod)
            else:
                by_index.setdefault(index, []).append(pod)
        for index in sorted(by_index):
            *extra, keep = _removal_order(by_index[index])
            rm += extra
            left.append(keep)
    if len(rm) < at_least:
        rm += _removal_order(left)[:at_least - len(rm)]
    return rm


def _intervals(indexes: set[int]) -> str:
    """status.completedIndexes and failedIndexes: ``0,1,3-5`` (indexed_job_utils.go,
    orderedIntervals.String: a run of two is written as two numbers, of three or more as a
    range)."""
    runs: list[list[int]] = []
    for i in sorted(indexes):
        if runs and runs[-1][1] == i - 1:
            runs[-1][1] = i
        else:
            runs.append([i, i])
    return ",".join(str(a) if a == b else f"{a},{b}" if b == a + 1 else f"{a}-{b}"
                    for a, b in runs)


def _parse_intervals(text: str, completions: int) -> set[int]:
    """The indexes of a status's ``0,1,3-5`` below `completions` (parseIndexesFromString)."""
    out: set[int] = set()
    for part in filter(None, (text or "").split(",")):
        first, _, last = part.partition("-")
        if not first.isdigit() or (last and not last.isdigit()):
            continue  # (a corrupted interval is skipped, as the controller logs and skips)
        out.update(range(int(first), min(int(last or first), completions - 1) + 1))
    return out


def _annotation_count(pod: dict, key: str) -> int:
    """A pod's failure count annotation (parseIndexFailureCountAnnotation: 0 when absent or
    not a non-negative int32)."""
    value = (pod["metadata"].get("annotations") or {}).get(key, "")
    return int(value) if value.isdigit() and int(value) <= 2**31 - 1 else 0


def _absolute_failures(pod: dict) -> int:
    return _annotation_count(pod, FAILURE_COUNT) + _annotation_count(pod, IGNORED_COUNT)


class JobController:
    """One thread syncing the Jobs whose Job or pods changed."""

    SYNCS = 5

    def __init__(self, store: KubeStore, api: LocalClient, *,
                 backoff: float = DEFAULT_BACKOFF, max_backoff: float = MAX_BACKOFF):
        self.store = store
        # the pod failure backoff (seconds): the delay after one failure, and its cap; read
        # at each sync, so a test may lower them on a running controller
        self.backoff, self.max_backoff = backoff, max_backoff
        # Job key -> its pod failure backoff, kept in memory as the controller's
        # podBackoffStore is (a new controller starts without them)
        self._backoffs: dict[tuple[str, str], Backoff] = {}
        # its requests, to the emulator's handler in process (kube_local_client)
        self.api = api
        # Jobs to sync, put by the store's listener on every change of a Job or of its pods
        # (under the store's lock, on the writer's thread): a SimpleQueue, whose put is one
        # C call, where Queue's took a Python lock and condition (bench/workloads.py)
        self._queue: queue.SimpleQueue[tuple[str, str] | None] = queue.SimpleQueue()
        # the Jobs put there and not yet taken (client-go's work queue keeps the same "dirty"
        # set): a change of a Job already waiting puts nothing, as its sync will read the
        # store after it (a Job's 8 pod creates put it once, not 8 times: each put woke the
        # dispatcher, 4% of the server thread's samples in bench/workloads.py)
        self._dirty: set[tuple[str, str]] = set()
        self._thread = threading.Thread(target=self._run, name="job-controller", daemon=True)
        self.errors: list[str] = []  # what a sync could not do (a test may assert it is empty)
        # deleted Jobs whose pods the garbage collector's part still has to handle
        self._collections: queue.Queue[tuple[dict, str]] = queue.Queue()
        # controller uid -> (namespace, name) of the pods it controls, kept by `_noticed`
        # under the store's lock: a sync reads its Job's few pods instead of copying every
        # pod of the namespace (a burst of 1,000 Jobs synced each Job ~5 times over
        # thousands of pods: the emulator's largest cost in bench/workloads.py)
        self._owned: dict[str, set[tuple[str, str]]] = {}
        # kube-controller-manager syncs 5 Jobs at once (--concurrent-job-syncs) and creates
        # a Job's pods in parallel batches (each batch's creates handled concurrently on the
        # server's loop: `_create`): one by one, each create waiting for the admission
        # webhook, the emulator's controller was what held up a burst of Jobs
        # (bench/workloads.py). The sync threads' native ids: for a bench's CPU accounting.
        self.thread_ids: set[int] = set()
        # Job key -> "queued" (for a sync worker), "running", or "again" (changed while
        # running: synced once more after), as client-go's work queue keeps them
        self._states: dict[tuple[str, str], str] = {}
        self._states_lock = threading.Lock()
        # Job key -> (when, the timer that syncs it again then): its active deadline or the
        # end of its pod failure backoff, whichever comes first (queue.AddAfter)
        self._timers: dict[tuple[str, str], tuple[float, threading.Timer]] = {}
        self._timers_lock = threading.Lock()
        self._syncs = ThreadPoolExecutor(self.SYNCS, "job-sync", initializer=self._note_thread)

    def start(self) -> JobController:
        with self.store.lock:  # the pods there are now, then every change (same lock)
            for pod in self.store.list("pods")[0]:
                self._own(pod, None)
            self.store.listeners.append(self._noticed)
        for job in self.store.list("jobs.batch")[0]:
            self._add((job["metadata"]["namespace"], job["metadata"]["name"]))
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._noticed in self.store.listeners:
            self.store.listeners.remove(self._noticed)
        self._queue.put(None)
        with self._timers_lock:
            for _, timer in self._timers.values():
                timer.cancel()
            self._timers.clear()
        self._thread.join(10)
        self._syncs.shutdown(wait=False, cancel_futures=True)

    def _note_thread(self) -> None:
        self.thread_ids.add(threading.get_native_id())

    def _noticed(self, change: Change) -> None:
        if change.ref == "jobs.batch":
            meta = change.obj["metadata"]
            self._add((meta.get("namespace", ""), meta["name"]))
        elif change.ref == "pods":
            if change.type == "DELETED":
                self._own(None, change.prev or change.obj)
            elif change.prev is None or change.prev["metadata"].get("ownerReferences") is not \
                    change.obj["metadata"].get("ownerReferences"):
                # (a write that kept the pod's ownerReferences as they were, e.g. a Binding
                # or a status, shares them: its owner is the same, nothing to note)
                self._own(change.obj, change.prev)
            elif _counted(change.prev) == _counted(change.obj):
                return  # the same owner, and nothing a sync counts changed (a Binding): the
                # Job's sync would find what its last one found
            owner = _owner(change.obj)
            if owner is not None:
                self._add((change.obj["metadata"].get("namespace", ""), owner[0]))

    def _add(self, key: tuple[str, str]) -> None:
        """Queue the Job `key` for a sync unless it waits there already, or mark it to be
        synced once more when it is being synced now (the pods its sync creates come back
        here while it runs: no wake-up of the dispatcher for them). (Two threads may both
        put it: the dispatcher syncs it once. The dispatcher forgets a key before it hands
        it on, so a change after that puts it again.)"""
        if key in self._dirty:
            return
        with self._states_lock:  # (under the store's lock here; never taken the other way)
            if self._states.get(key) in ("running", "again"):
                self._states[key] = "again"  # `_work` syncs it again, reading the store anew
                return
        self._dirty.add(key)
        self._queue.put(key)

    def _own(self, pod: dict | None, prev: dict | None) -> None:
        """Keep `_owned` in step with one pod's write (`pod` None: deleted)."""
        for obj, add in ((prev, False), (pod, True)):
            owner = _owner(obj) if obj is not None else None
            if owner is None:
                continue
            key = (obj["metadata"].get("namespace", ""), obj["metadata"]["name"])
            if add:
                self._owned.setdefault(owner[1], set()).add(key)
            else:
                keys = self._owned.get(owner[1])
                if keys is not None:
                    keys.discard(key)
                    if not keys:
                        del self._owned[owner[1]]

    def _pods_of(self, uid: str) -> list[dict]:
        """The pods the Job `uid` controls, in name order (as a list gives them): the stored
        objects, which the controller only reads (as its informer's cache; copying them on
        every sync was a tenth of its CPU)."""
        with self.store.lock:
            keys = sorted(self._owned.get(uid, ()))
            out = []
            for namespace, name in keys:
                try:
                    pod = self.store.get("pods", namespace, name, copy=False)
                except ApiError:
                    continue
                if (_owner(pod) or ("", ""))[1] == uid:
                    out.append(pod)
            return out

    def _run(self) -> None:

        while True:
            key = self._queue.get()
            if key is None:
                return
            pending = {key}
            while not self._queue.empty():  # a burst of changes: each Job synced once
                more = self._queue.get()
                if more is None:
                    return
                pending.add(more)
            self._dirty.difference_update(pending)  # (before they are synced: see `_add`)
            while not self._collections.empty():
                job, policy = self._collections.get()
                try:
                    self._collect(job, policy)
                except Exception as exc:  # noqa: BLE001 (kept for the test to see)
                    self.errors.append(f"collecting {job['metadata']['name']}: {exc!r}")
            for job_key in sorted(pending):
                self._enqueue(job_key)

    def _enqueue(self, key: tuple[str, str]) -> None:
        """Hand a Job to the sync workers as client-go's work queue does: a key waiting is
        not queued twice, a key being synced is synced once more after (never by two
        workers at once), and each worker takes the next key as soon as it is done. (The
        controller once synced a batch of Jobs and waited for its slowest before the next:
        a Job resumed meanwhile waited for a whole batch in bench/workloads.py.)"""
        with self._states_lock:
            state = self._states.get(key)
            if state == "running":
                self._states[key] = "again"
            if state is not None:
                return
            self._states[key] = "queued"
        self._syncs.submit(self._work, key)

    def _work(self, key: tuple[str, str]) -> None:
        while True:
            with self._states_lock:
                self._states[key] = "running"
            self._sync_one(key)
            with self._states_lock:
                if self._states[key] != "again":
                    del self._states[key]
                    return

    def _sync_one(self, key: tuple[str, str]) -> None:
        namespace, name = key
        try:
            self.sync(namespace, name)
        except LocalApiError as exc:
            if exc.status in (404, 409):  # gone, or changed: the change re-queues it
                return
            self.errors.append(f"{namespace}/{name}: {exc.status} {exc.body}")
        except Exception as exc:  # noqa: BLE001 (kept for the test to see)
            self.errors.append(f"{namespace}/{name}: {exc!r}")

    # -- syncJob -------------------------------------------------------------------------
    def sync(self, namespace: str, name: str) -> None:
        try:
            job = self.store.get("jobs.batch", namespace, name, copy=False)
        except ApiError:  # deleted: nothing to do
            self._backoffs.pop((namespace, name), None)
            return
        if _true(job, "Complete") or _true(job, "Failed"):
            self._backoffs.pop((namespace, name), None)
            return
        uid = job["metadata"]["uid"]
        pods = [p for p in self._pods_of(uid) if _owner(p) == (name, uid)]
        spec = job.get("spec") or {}
        terminal = ("Succeeded", "Failed")
        phase = [(p, (p.get("status") or {}).get("phase")) for p in pods]
        active = [p for p, ph in phase if ph not in terminal
                  and not p["metadata"].get("deletionTimestamp")]
        terminating = [p for p, ph in phase if ph not in terminal
                       and p["metadata"].get("deletionTimestamp")]
        succeeded = [p for p, ph in phase if ph == "Succeeded"]
        failed = [p for p, ph in phase if ph == "Failed"]
        indexed = spec.get("completionMode") == "Indexed"
        completions = spec.get("completions")
        done_indexes = {i for p in succeeded if (i := _index(p)) is not None}
        if indexed:
            success = completions is not None and len(done_indexes) >= completions
        elif completions is not None:
            success = len(succeeded) >= completions
        else:
            success = bool(succeeded) and not active
        status = dict(job.get("status") or {})
        conditions = list(status.get("conditions") or [])
        backoff = self._backoff(job, succeeded, failed)

        def condition(type_: str, value: str, reason: str, message: str) -> None:
            nonlocal conditions
            old = next((c for c in conditions if c.get("type") == type_), None)
            if old is not None and old.get("status") == value:
                return
            conditions = [c for c in conditions if c.get("type") != type_] + [{
                "type": type_, "status": value, "reason": reason, "message": message,
                "lastProbeTime": _now(), "lastTransitionTime": _now()}]

        def finish(target: str, final: str, reason: str, message: str) -> bool:
            """The terminal condition delayed: `target` now and the active pods deleted,
            `final` once no pod runs; whether it is final now."""
            condition(target, "True", reason, message)
            self._delete(active)
            if active or terminating:
                return False
            condition(final, "True", reason, message)
            return True

        target = _condition(job, "FailureTarget")
        # podFailurePolicy: the failures an Ignore rule matched count nowhere but in the
        # backoff (status.failed and backoffLimit leave them out), and the first a FailJob
        # rule matched fails the Job (getFailJobMessage)
        counted, fail_job = _apply_failure_policy(spec.get("podFailurePolicy"), failed)
        per_index = spec.get("backoffLimitPerIndex") if indexed else None
        failed_indexes: set[int] = set()
        last_failed: dict[int, dict] = {}
        if per_index is not None:
            failed_indexes, last_failed = _per_index(spec, status, failed, active,
                                                     done_indexes)
        max_failed = spec.get("maxFailedIndexes")
        # startTime as it will be written: set when the Job first runs unsuspended
        if not spec.get("suspend") and not status.get("startTime"):
            status["startTime"] = _now()
        left = _deadline_left(spec, status)
        if target is not None and target.get("status") == "True":  # decided before
            finish("FailureTarget", "Failed", target.get("reason", ""),
                   target.get("message", ""))
            active = []
        elif fail_job is not None:
            finish("FailureTarget", "Failed", "PodFailurePolicy", fail_job)
            active = []
        elif len(counted) > int(spec.get("backoffLimit", 6)):
            finish("FailureTarget", "Failed", "BackoffLimitExceeded",
                   "Job has reached the specified backoff limit")
            active = []
        elif left is not None and left <= 0:
            finish("FailureTarget", "Failed", "DeadlineExceeded",
                   "Job was active longer than specified deadline")
            active = []
        elif per_index is not None and max_failed is not None and \
                len(failed_indexes) > int(max_failed):
            finish("FailureTarget", "Failed", "MaxFailedIndexesExceeded",
                   "Job has exceeded the specified maximal number of failed indexes")
            active = []
        elif failed_indexes and len(failed_indexes | done_indexes) >= int(completions or 0):
            finish("FailureTarget", "Failed", "FailedIndexes", "Job has failed indexes")
            active = []
        elif success:
            if finish("SuccessCriteriaMet", "Complete", "CompletionsReached",
                      "Reached expected number of succeeded pods"):
                status["completionTime"] = _now()
            active = []
        elif spec.get("suspend"):
            self._delete(active)
            active = []
            condition("Suspended", "True", "JobSuspended", "Job suspended")
        else:
            if _true(job, "Suspended"):
                condition("Suspended", "False", "JobResumed", "Job resumed")
                status["startTime"] = _now()
                left = _deadline_left(spec, status)
            if left is not None:
                self._sync_at((namespace, name), left)
            active = self._manage(job, active, terminating, succeeded,
                                  done_indexes | failed_indexes, backoff, last_failed)
        ready = sum(1 for p in active if _ready(p))
        status.update(active=len(active), succeeded=len(succeeded), failed=len(counted),
                      ready=ready, terminating=len(terminating), conditions=conditions,
                      uncountedTerminatedPods={})
        if indexed:
            status["completedIndexes"] = _intervals(done_indexes)
        if per_index is not None:
            status["failedIndexes"] = _intervals(failed_indexes)
        for zero in ("active", "succeeded", "failed"):  # omitempty
            if not status[zero]:
                del status[zero]
        if not conditions:
            del status["conditions"]
        if status != (job.get("status") or {}):
            self.api.request("PUT", f"/apis/batch/v1/namespaces/{namespace}/jobs/{name}/status",
                             {**job, "status": status})
        # kept once the status counting these pods is written (trackJobStatusAndRemove-
        # Finalizers updates the backoff store after the status update)
        self._backoffs[(namespace, name)] = backoff

    def _backoff(self, job: dict, succeeded: list[dict], failed: list[dict]) -> Backoff:
        """The Job's pod failure backoff with the pods finished since its last sync counted.
        A Job this controller has not synced before whose status already counts finished
        pods (synced by an earlier controller) takes its present finished pods as counted:
        the real controller finds them without its tracking finalizer, so not new."""
        key = (job["metadata"].get("namespace", ""), job["metadata"]["name"])
        record = self._backoffs.get(key)
        if record is None:
            status = job.get("status") or {}
            record = Backoff()
            if status.get("failed") or status.get("succeeded"):
                record = Backoff(counted=frozenset(p["metadata"]["uid"]
                                                   for p in succeeded + failed))
        return record.after(succeeded, failed)

    def _sync_at(self, key: tuple[str, str], left: float) -> None:
        """Sync the Job `key` again in `left` seconds (its active deadline, or the end of its
        pod failure backoff), as the controller's queue.AddAfter: a key already waiting keeps
        the earlier of the two times (client-go's delaying queue), and the sync then sets
        the later one again if it still matters."""
        due = time.monotonic() + max(0.0, left)
        timer = threading.Timer(max(0.0, left), self._fire, (key,))
        timer.daemon = True
        with self._timers_lock:
            old = self._timers.get(key)
            if old is not None:
                if old[0] <= due:
                    return
                old[1].cancel()
            self._timers[key] = (due, timer)
        timer.start()

    def _fire(self, key: tuple[str, str]) -> None:
        with self._timers_lock:
            entry = self._timers.get(key)
            if entry is not None and entry[1] is threading.current_thread():
                del self._timers[key]
        self._add(key)

    def collect(self, job: dict, policy: str) -> None:
        """A Job was deleted through the API with this propagation policy: its pods are
        handled on the controller's thread (the caller may be the server's loop)."""
        self._collections.put((job, policy))
        # the dispatcher, which collects, is woken whatever the Job's state: `_add` puts
        # nothing for a Job being synced now (it marks it to be synced again, by a sync
        # worker), and the pods then waited for some other change to be collected
        self._queue.put((job["metadata"]["namespace"], job["metadata"]["name"]))

    def _collect(self, job: dict, policy: str) -> None:
        """What the garbage collector does with a deleted Job's pods (pkg/controller/
        garbagecollector): ``Orphan`` (batch/v1's default when the request names no policy)
        takes the Job's ownerReference off them, ``Background`` and ``Foreground`` delete them
        (here both after the Job is gone)."""
        uid = job["metadata"]["uid"]
        pods = self._pods_of(uid)
        if policy != "Orphan":
            self._delete(pods)
            return
        for pod in pods:
            refs = pod["metadata"].get("ownerReferences") or []
            at = next(i for i, r in enumerate(refs) if r.get("uid") == uid)
            # the last one: the field goes (an empty list is omitted, as the server writes it)
            path = "/metadata/ownerReferences" + ("" if len(refs) == 1 else f"/{at}")
            self.api.request("PATCH", _pods_path(pod["metadata"]["namespace"],
                                                 pod["metadata"]["name"]),
                             [{"op": "remove", "path": path}], "application/json-patch+json")

    def _delete(self, pods: list[dict]) -> None:
        for pod in pods:
            try:
                self.api.request("DELETE", _pods_path(pod["metadata"]["namespace"],
                                                      pod["metadata"]["name"]))
            except LocalApiError as exc:
                if exc.status != 404:
                    raise

    def _manage(self, job: dict, active: list[dict], terminating: list[dict],
                succeeded: list[dict], done_indexes: set[int], backoff: Backoff,
                last_failed: dict[int, dict]) -> list[dict]:
        """Delete the active pods beyond what the Job wants, or else create the pods missing
        (manageJob: one or the other in a sync, deletion first), none while the pod failure
        `backoff` runs (the Job synced again at its end, enqueueControllerDelayed), and with
        ``podReplacementPolicy: Failed`` (the default with a podFailurePolicy) none in place
        of a pod still terminating (onlyReplaceFailedPods); returns the active pods after
        it. With backoffLimitPerIndex (`last_failed`: each index's last failed pod, and
        `done_indexes` with the failed indexes) each index has its own backoff, counted
        from its last failed pod's failure count annotations (getRemainingTimePerIndex),
        and the new pod carries them on (addIndexFailureCountAnnotation)."""
        spec = job["spec"]
        parallelism = int(spec.get("parallelism", 1))
        completions = spec.get("completions")
        if completions is None:  # a work queue: once one succeeded, what runs is left
            want_active = len(active) if succeeded else parallelism
        else:
            want_active = max(0, min(parallelism, int(completions) - len(succeeded)))
        indexed = spec.get("completionMode") == "Indexed"
        remove = _for_removal(active, len(active) - want_active,
                              completions if indexed else None)
        if remove:
            self._delete(remove)
            gone = {id(p) for p in remove}
            return [p for p in active if id(p) not in gone]
        waiting = terminating if spec.get("podReplacementPolicy") == "Failed" else []
        if indexed:
            busy = {_index(p) for p in active + waiting}
            missing = [i for i in range(int(completions or 0))
                       if i not in done_indexes and i not in busy]
            room = parallelism - len(active) - len(waiting)
            new: list[int | None] = list(missing[:max(0, room)])
        else:
            new = [None] * max(0, want_active - len(active) - len(waiting))
        per_index = indexed and spec.get("backoffLimitPerIndex") is not None
        meta = job["metadata"]
        if new and not per_index:
            wait = backoff.remaining(self.backoff, self.max_backoff)
            if wait > 0:
                self._sync_at((meta["namespace"], meta["name"]), wait)
                return active
        elif new:  # getPodCreationInfoForIndependentIndexes
            waits = {i: Backoff(_absolute_failures(last_failed[i]) + 1,
                                _finished_time(last_failed[i])).remaining(
                         self.backoff, self.max_backoff) if i in last_failed else 0.0
                     for i in new if i is not None}
            now = [i for i in new if not waits.get(i)]
            if not now:
                self._sync_at((meta["namespace"], meta["name"]), min(waits.values()))
                return active
            new = now
        # the answers read as JSON, as the controller's informer has them (`_Api`)
        policy = spec.get("podFailurePolicy")
        return active + self._create(job["metadata"]["namespace"], [
            self._pod(job, index, _failure_counts(policy, last_failed.get(index))
                      if per_index else None) for index in new])

    def _create(self, namespace: str, pods: list[dict]) -> list[dict]:
        """Create `pods` as controller_utils.go's slowStartBatch does: batches of 1, 2, 4, ...
        each sent at once (the batch's creates handled concurrently, as the controller's
        goroutines send them), the next batch once it is done; the first failure stops it
        (raised once its batch is done). All of them in one hop to the server's loop
        (`LocalClient.request_batches`)."""
        batches: list[list[tuple[str, str, Any]]] = []
        size, start = 1, 0
        while start < len(pods):
            batches.append([("POST", _pods_path(namespace), p)
                            for p in pods[start:start + size]])
            start, size = start + size, size * 2
        answers = self.api.request_batches(batches) if batches else []
        failed = next((a for a in answers if isinstance(a, LocalApiError)), None)
        if failed is not None:
            raise failed
        return [a for a in answers if not isinstance(a, LocalApiError)]

    @staticmethod
    def _pod(job: dict, index: int | None,
             failures: tuple[int, int] | None = None) -> dict:
        """A pod from the Job's template (controller_utils.go GetPodFromTemplate, with the
        Indexed Job's additions, and with backoffLimitPerIndex its index's `failures`:
        counted, ignored)."""
        meta, template = job["metadata"], (job["spec"].get("template") or {})
        labels = dict((template.get("metadata") or {}).get("labels") or {})
        annotations = dict((template.get("metadata") or {}).get("annotations") or {})
        spec = dict(template.get("spec") or {})
        name = f"{meta['name']}-"
        if index is not None:
            name = f"{meta['name']}-{index}-"
            labels[INDEX] = annotations[INDEX] = str(index)
            variable = {"name": "JOB_COMPLETION_INDEX", "valueFrom": {"fieldRef": {
                "fieldPath": f"metadata.annotations['{INDEX}']"}}}
            for key in ("initContainers", "containers"):
                if spec.get(key):
                    spec[key] = [{**c, "env": [*(c.get("env") or []), variable]}
                                 for c in spec[key]]
            spec.setdefault("hostname", f"{meta['name']}-{index}")
        if failures is not None:
            annotations[FAILURE_COUNT] = str(failures[0])
            if failures[1]:
                annotations[IGNORED_COUNT] = str(failures[1])
        pod_meta: dict[str, Any] = {"generateName": name, "labels": labels,
                                    "ownerReferences": [{
                                        "apiVersion": "batch/v1", "kind": "Job",
                                        "name": meta["name"], "uid": meta["uid"],
                                        "controller": True, "blockOwnerDeletion": True}]}
        if annotations:
            pod_meta["annotations"] = annotations
        return {"apiVersion": "v1", "kind": "Pod", "metadata": pod_meta, "spec": spec}
