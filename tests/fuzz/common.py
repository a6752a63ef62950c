"""What the fuzz targets share: seeding the corpus directory and running libFuzzer."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable
from pathlib import Path

import atheris


def run(one_input: Callable[[bytes], None], seeds: Callable[[], Iterable[bytes]]) -> None:
    """Seed the first corpus directory given (if empty), then hand over to libFuzzer."""
    dirs = [a for a in sys.argv[1:] if not a.startswith("-")]
    if dirs:
        corpus = Path(dirs[0])
        corpus.mkdir(parents=True, exist_ok=True)
        if not any(corpus.iterdir()):
            for i, seed in enumerate(seeds()):
                (corpus / f"seed-{i}").write_bytes(seed)
    atheris.Setup(sys.argv, one_input)
    atheris.Fuzz()
