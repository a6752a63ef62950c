"""What a batch/v1 Job runs, read from its spec with the API server's defaults.

Both the admission webhook (a size declared on the template must equal it) and the FluxJob
record (the number of slots to allocate) need a Job's pod count. Kubernetes defaults an
unset ``spec.parallelism`` to 1 (SetDefaults_Job; both unset: both 1), and a Job runs at
most ``completions`` pods at once when that is set, so the count is
``min(parallelism, completions)``. Unlike `podgroup.job_size`, which reads an Indexed Job
(completions always set) as the informer stores it, this is for any Job, as admitted.
"""

from __future__ import annotations


class JobShapeError(ValueError):
    """A Job field of the wrong type or range; the message names the field."""


def integer_field(value: object, where: str, minimum: int) -> int:
    """`value` as an integer >= minimum: an int, or a decimal string without spaces (as
    labels and annotations carry numbers)."""
    number = None
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    elif isinstance(value, str) and value.strip() == value:
        try:
            number = int(value)
        except ValueError:
            number = None
    if number is None:
        raise JobShapeError(f"{where}: {value!r} is not an integer")
    if number < minimum:
        raise JobShapeError(f"{where}: {number} must be >= {minimum}")
    return number


def job_pod_count(spec: dict) -> int:
    """Pods the Job runs at once: parallelism (default 1), capped by completions if set."""
    parallelism = integer_field(spec.get("parallelism", 1), "spec.parallelism", minimum=0)
    completions = spec.get("completions")
    if completions is None:
        return parallelism
    return min(parallelism, integer_field(completions, "spec.completions", minimum=0))


def is_indexed(spec: dict) -> bool:
    return spec.get("completionMode") == "Indexed"
