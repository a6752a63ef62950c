"""A batch/v1 Job's spec as the API server validates it (pkg/apis/batch/validation/
validation.go, ``validateJobSpec``), for the parts the emulated Job controller acts on: the
template's ``restartPolicy`` and ``podFailurePolicy`` (``validatePodFailurePolicy`` and its
rules), ``backoffLimitPerIndex`` and ``maxFailedIndexes``.

Each error is worded as apimachinery's ``field.Error`` prints it (``ErrorBody``: the type,
the bad value as Go formats it, the detail), so a test that reads the 422's message or its
causes reads what a real server answers. The store calls `job_causes` on every create and
update of a Job (kube_store ``_validate``); the defaults come first (kube_store
``default_job``: a pattern's ``status`` is True when unset, pkg/apis/batch/v1/defaults.go).
What the rest of validateJobSpec checks (the pod template's own validation, selectors,
``successPolicy``, the high-completions limits) is not done here.
"""

from __future__ import annotations

from typing import Any

from fluxnode.testing.kube_events import qualified_name_errors

ACTIONS = ("Count", "FailIndex", "FailJob", "Ignore")  # sets.List: sorted
OPERATORS = ("In", "NotIn")
STATUSES = ("False", "True", "Unknown")
MAX_RULES = 20  # maxPodFailurePolicyRules
MAX_VALUES = 255  # maxPodFailurePolicyOnExitCodesValues
MAX_PATTERNS = 20  # maxPodFailurePolicyOnPodConditionsPatterns


def _go(value: Any) -> str:
    """A bad value as ``field.Error`` prints it: numbers plain, strings quoted, an int32
    slice as ``%#v`` does."""
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, list):
        return "[]int32{" + ", ".join(str(v) for v in value) + "}" if value else \
            "[]int32(nil)"
    return str(value)


def _quoted(values: tuple[str, ...]) -> str:
    return ", ".join(f'"{v}"' for v in values)


def _required_valid(values: tuple[str, ...]) -> str:
    """``field.Required(path, fmt.Sprintf("valid values: %q", list))``."""
    return "Required value: valid values: [" + " ".join(f'"{v}"' for v in values) + "]"


def _unsupported(value: Any, values: tuple[str, ...]) -> str:
    return f"Unsupported value: {_go(value)}: supported values: {_quoted(values)}"


def _on_exit_codes(req: dict, where: str, containers: set[str]) -> list[tuple[str, str]]:
    """validatePodFailurePolicyRuleOnExitCodes."""
    causes: list[tuple[str, str]] = []
    operator = req.get("operator") or ""
    if not operator:
        causes.append((f"{where}.operator", _required_valid(OPERATORS)))
    elif operator not in OPERATORS:
        causes.append((f"{where}.operator", _unsupported(operator, OPERATORS)))
    name = req.get("containerName")
    if name is not None and name not in containers:
        causes.append((f"{where}.containerName", f"Invalid value: {_go(name)}: must be one "
                       "of the container or initContainer names in the pod template"))
    values = list(req.get("values") or [])
    if not values:
        causes.append((f"{where}.values", f"Invalid value: {_go(values)}: at least one value "
                       "is required"))
    elif len(values) > MAX_VALUES:
        causes.append((f"{where}.values", f"Too many: {len(values)}: must have at most "
                       f"{MAX_VALUES} items"))
    seen: set[int] = set()
    for j, value in enumerate(values):
        if operator == "In" and value == 0:
            causes.append((f"{where}.values[{j}]",
                           "Invalid value: 0: must not be 0 for the In operator"))
        if value in seen:
            causes.append((f"{where}.values[{j}]", f"Duplicate value: {value}"))
        seen.add(value)
    if any(a > b for a, b in zip(values, values[1:], strict=False)):
        causes.append((f"{where}.values", f"Invalid value: {_go(values)}: must be ordered"))
    return causes


def _on_pod_conditions(patterns: list, where: str) -> list[tuple[str, str]]:
    """validatePodFailurePolicyRuleOnPodConditions."""
    causes: list[tuple[str, str]] = []
    if len(patterns) > MAX_PATTERNS:
        causes.append((where, f"Too many: {len(patterns)}: must have at most {MAX_PATTERNS} "
                       "items"))
    for j, pattern in enumerate(patterns):
        type_ = str(pattern.get("type") or "")
        for message in qualified_name_errors(type_):
            causes.append((f"{where}[{j}].type", f"Invalid value: {_go(type_)}: {message}"))
        status = pattern.get("status") or ""
        if not status:
            causes.append((f"{where}[{j}].status", _required_valid(STATUSES)))
        elif status not in STATUSES:
            causes.append((f"{where}[{j}].status", _unsupported(status, STATUSES)))
    return causes


def _rule(spec: dict, rule: dict, where: str, containers: set[str]) -> list[tuple[str, str]]:
    """validatePodFailurePolicyRule."""
    causes: list[tuple[str, str]] = []
    action = rule.get("action") or ""
    if not action:
        causes.append((f"{where}.action", _required_valid(ACTIONS)))
    elif action == "FailIndex":
        if spec.get("backoffLimitPerIndex") is None:
            causes.append((f"{where}.action", 'Invalid value: "FailIndex": requires the '
                           "backoffLimitPerIndex to be set"))
    elif action not in ACTIONS:
        causes.append((f"{where}.action", _unsupported(action, ACTIONS)))
    exit_codes = rule.get("onExitCodes")
    conditions = rule.get("onPodConditions") or []
    if exit_codes is not None:
        causes += _on_exit_codes(exit_codes, f"{where}.onExitCodes", containers)
    if conditions:
        causes += _on_pod_conditions(conditions, f"{where}.onPodConditions")
    if exit_codes is not None and conditions:
        causes.append((where, "Invalid value: specifying both OnExitCodes and "
                       "OnPodConditions is not supported"))
    if exit_codes is None and not conditions:
        causes.append((where, "Invalid value: specifying one of OnExitCodes and "
                       "OnPodConditions is required"))
    return causes


def _nonnegative(spec: dict, key: str) -> list[tuple[str, str]]:
    value = spec.get(key)
    if isinstance(value, int) and value < 0:
        return [(f"spec.{key}", f"Invalid value: {value}: must be greater than or equal to 0")]
    return []


def default_pod_failure_policy(spec: dict) -> None:
    """A Job spec's podFailurePolicy defaults, in place (pkg/apis/batch/v1/defaults.go): an
    onPodConditions pattern without a status matches status True."""
    for rule in (spec.get("podFailurePolicy") or {}).get("rules") or []:
        for pattern in rule.get("onPodConditions") or []:
            if isinstance(pattern, dict) and not pattern.get("status"):
                pattern["status"] = "True"


def job_causes(job: dict) -> list[tuple[str, str]]:
    """The validation errors of a Job's spec (see the module's docstring), in
    validateJobSpec's order, as (field, message)."""
    spec = job.get("spec") or {}
    causes: list[tuple[str, str]] = []
    for key in ("parallelism", "completions", "activeDeadlineSeconds", "backoffLimit",
                "ttlSecondsAfterFinished", "backoffLimitPerIndex", "maxFailedIndexes"):
        causes += _nonnegative(spec, key)
    per_index = spec.get("backoffLimitPerIndex")
    max_failed = spec.get("maxFailedIndexes")
    if max_failed is not None and per_index is None:
        causes.append(("spec.backoffLimitPerIndex",
                       "Required value: when maxFailedIndexes is specified"))
    indexed = spec.get("completionMode") == "Indexed"
    if indexed and max_failed is not None and spec.get("completions") is not None \
            and max_failed > spec["completions"]:
        causes.append(("spec.maxFailedIndexes", f"Invalid value: {max_failed}: must be less "
                       "than or equal to completions"))
    if not indexed:
        if per_index is not None:
            causes.append(("spec.backoffLimitPerIndex",
                           f"Invalid value: {per_index}: requires indexed completion mode"))
        if max_failed is not None:
            causes.append(("spec.maxFailedIndexes",
                           f"Invalid value: {max_failed}: requires indexed completion mode"))
    policy = spec.get("podFailurePolicy")
    pod_spec = (spec.get("template") or {}).get("spec") or {}
    if policy is not None:
        rules = policy.get("rules") or []
        if len(rules) > MAX_RULES:
            causes.append(("spec.podFailurePolicy.rules",
                           f"Too many: {len(rules)}: must have at most {MAX_RULES} items"))
        containers = {c.get("name") for key in ("containers", "initContainers")
                      for c in pod_spec.get(key) or []}
        for i, rule in enumerate(rules):
            causes += _rule(spec, rule, f"spec.podFailurePolicy.rules[{i}]", containers)
        replacement = spec.get("podReplacementPolicy")
        if replacement is not None and replacement != "Failed":
            causes.append(("spec.podReplacementPolicy",
                           f'Unsupported value: {_go(replacement)}: supported values: '
                           '"Failed"'))
    restart = pod_spec.get("restartPolicy") or ""
    where = "spec.template.spec.restartPolicy"
    if restart in ("", "Always"):
        causes.append((where, 'Required value: valid values: "OnFailure", "Never"'))
    elif restart not in ("OnFailure", "Never"):
        causes.append((where, f'Unsupported value: {_go(restart)}: supported values: '
                       '"OnFailure", "Never"'))
    elif policy is not None and restart != "Never":
        causes.append((where, f'Invalid value: {_go(restart)}: only "Never" is supported '
                       "when podFailurePolicy is specified"))
    return causes
