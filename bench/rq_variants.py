"""Variants of a resource-query conformance corpus, with Fluxion's own answers.

A corpus case fixes a policy, a writer and a prune filter. The same graphs, jobspecs and
command scripts make new cases under another option, and Fluxion's ``resource-query``
(built beside the project, never committed) supplies the expected output of each. This
is how ``locality``, ``variation`` and custom policies (``policy=low
stop_on_1_matches=true``) were checked, none of which either corpus covers.

    .venv/bin/python bench/rq_variants.py --corpus ../shared/fluxion-random \\
        --fluxion /path/to/flux-sched/build/resource/utilities/resource-query \\
        --policy locality --out /tmp/rq-locality
    cd /tmp/rq-locality && PATH=$PWD/.venv/bin:$PATH python3 \\
        ../shared/fluxion-corpus/run_conformance.py --manifest cases.jsonl --root . \\
        --cmd 'fluxnode resource-query'

Cases whose command line the change leaves as it was are dropped (the corpus has them),
and so are cases Fluxion itself rejects (non-zero exit).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

PLACEHOLDER = b"@TEST_SRCDIR@"


def fluxion_run(fluxion: str, argv: list[str], root: Path, commands: Path,
                timeout: float = 120) -> tuple[subprocess.CompletedProcess, bytes | None]:
    """Fluxion's resource-query on one case of a corpus at ``root``: ``argv`` with
    ``{root}`` filled in, the commands file with @TEST_SRCDIR@ made ``root``, its ``-t``
    file in a scratch folder. Returns the run and that file's bytes (None: not written)."""
    cmds = commands.read_bytes().replace(PLACEHOLDER, str(root).encode())
    with tempfile.TemporaryDirectory() as tmp:
        got = Path(tmp) / "out"
        run = subprocess.run(
            [fluxion, *[a.replace("{root}", str(root)) for a in argv], "-t", str(got)],
            input=cmds, capture_output=True, cwd=tmp, timeout=timeout, check=False)
        return run, (got.read_bytes() if got.exists() else None)


def with_option(argv: list[str], flag: str, value: str) -> list[str]:
    """``argv`` with ``flag``'s value set to ``value`` (appended when absent)."""
    out = list(argv)
    if flag in out:
        out[out.index(flag) + 1] = value
    else:
        out += [flag, value]
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpus", type=Path, required=True,
                    help="folder holding cases.jsonl and data/")
    ap.add_argument("--fluxion", required=True, help="Fluxion's resource-query binary")
    ap.add_argument("--policy", help="resource-query's -P for every case")
    ap.add_argument("--writer", help="its -F (simple, pretty_simple, jgf, rlite, rv1, ...)")
    ap.add_argument("--prune", help="its -p (e.g. ALL:core,ALL:node)")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    changes = [(flag, value) for flag, value in
               (("-P", args.policy), ("-F", args.writer), ("-p", args.prune)) if value]
    if not changes:
        ap.error("give at least one of --policy, --writer, --prune")
    src = args.corpus.resolve()
    out = args.out.resolve()
    (out / "data" / "expected").mkdir(parents=True, exist_ok=True)
    for part in (src / "data").iterdir():  # graphs, jobspecs, commands: shared
        link = out / "data" / part.name
        if part.is_dir() and part.name != "expected" and not link.exists():
            link.symlink_to(part)
    kept = 0
    with open(out / "cases.jsonl", "w") as manifest:
        for line in open(src / "cases.jsonl"):
            case = json.loads(line)
            argv = case["argv"]
            for flag, value in changes:
                argv = with_option(argv, flag, value)
            if argv == case["argv"]:
                continue
            run, got = fluxion_run(args.fluxion, argv, src, src / case["commands"])
            if run.returncode != 0 or got is None:
                continue
            expected = f"data/expected/{case['id'].replace('/', '__')}.out"
            (out / expected).write_bytes(got)
            case["argv"], case["expected"] = argv, expected
            case.pop("expected_stderr", None)
            manifest.write(json.dumps(case) + "\n")
            kept += 1
    print(f"{kept} cases in {out / 'cases.jsonl'}", file=sys.stderr)
    return 0 if kept else 1


if __name__ == "__main__":
    sys.exit(main())
