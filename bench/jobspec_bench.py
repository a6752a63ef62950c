"""Jobspec parsing speed: YAML text (resource-query reads a file per match) and dicts (RPCs).

Run: .venv/bin/python bench/jobspec_bench.py [--seconds S]

Uses the corpus' jobspecs when /work/shared/fluxion-corpus is present, else built ones.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import yaml
from fluxnode.scheduler.jobspec.builder import SlotKind, build_jobspec
from fluxnode.scheduler.jobspec.jobspec import Jobspec

CORPUS = Path(__file__).resolve().parents[1].parent / "shared" / "fluxion-corpus"


def samples() -> dict[str, str]:
    js = CORPUS / "data" / "resource" / "jobspecs"
    picks = ["basics/test001.yaml", "basics/test003.yaml", "validation/valid/constraints.yaml",
             "min_max/test001.yaml"]
    out = {p: (js / p).read_text() for p in picks if (js / p).is_file()}
    if not out:
        built = build_jobspec([SlotKind(2, 1, 0, 4)], nnodes=2, duration=3600)
        out["built"] = yaml.safe_dump(built)
    return out


def rate(fn, seconds: float) -> float:
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        for _ in range(50):
            fn()
        n += 50
    return n / (time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=1.0, help="time per measurement")
    args = ap.parse_args()
    for name, text in samples().items():
        doc = json.loads(json.dumps(Jobspec.parse(text).to_dict()))
        as_json = json.dumps(doc)
        print(f"{name}: YAML {rate(lambda t=text: Jobspec.parse(t), args.seconds):,.0f}/s, "
              f"JSON {rate(lambda t=as_json: Jobspec.parse(t), args.seconds):,.0f}/s, "
              f"dict {rate(lambda d=doc: Jobspec.parse(d), args.seconds):,.0f}/s")


if __name__ == "__main__":
    main()
