"""`fluxnode binder` without a usable Kubernetes configuration says where it looked, in the
user's words (--kubeconfig or $KUBECONFIG, or how to give one), in one line, exit 1."""

from __future__ import annotations

import os
import subprocess
import sys

PREFIX = "Error: cannot load Kubernetes configuration: "


def run(*args: str, env: dict | None = None, home: str = "/nonexistent") -> str:
    clean = {k: v for k, v in os.environ.items()
             if k not in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST")
             and not k.startswith("FLUXNODE_")}
    r = subprocess.run([sys.executable, "-m", "fluxnode", "binder", *args],
                       env={**clean, "HOME": home, **(env or {})}, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 1 and r.stdout == "", r
    assert r.stderr.count("\n") == 1, r.stderr
    return r.stderr.rstrip("\n")


def test_a_missing_kubeconfig_is_named_as_given(tmp_path):
    missing = tmp_path / "kubeconfig"
    assert run("--kubeconfig", str(missing)) == f"{PREFIX}--kubeconfig {missing}: no such file"
    assert run(env={"KUBECONFIG": str(missing)}) == f"{PREFIX}$KUBECONFIG {missing}: no such file"
    both = f"{missing}:{tmp_path / 'other'}"
    assert run(env={"KUBECONFIG": both}) == (
        f"{PREFIX}$KUBECONFIG {both}: none of these files exists")


def test_a_broken_kubeconfig_is_one_line(tmp_path):
    broken = tmp_path / "kubeconfig"
    broken.write_text("clusters: [\n")
    line = run("--kubeconfig", str(broken))
    assert line.startswith(f"{PREFIX}--kubeconfig {broken}: while parsing a flow node "), line


def test_no_configuration_at_all_says_how_to_give_one(tmp_path):
    assert run(home=str(tmp_path)) == (
        f"{PREFIX}Invalid kube-config file. No configuration found. (outside a pod, pass "
        "--kubeconfig PATH or set KUBECONFIG; the default is ~/.kube/config)")


def test_a_webhook_secret_without_its_namespace_is_named(tmp_path):
    assert run("--webhook-port", "9443", "--webhook-secret", "fluxnode-webhook-cert") == (
        "Error: --webhook-secret: expected NAMESPACE/NAME, got 'fluxnode-webhook-cert'")


def test_certificate_lifetimes_that_cannot_work_are_named(tmp_path):
    assert run("--webhook-port", "9443", "--webhook-cert-lifetime", "60",
               "--webhook-ca-lifetime", "30") == (
        "Error: --webhook-ca-lifetime 30 is shorter than --webhook-cert-lifetime 60 (seconds)")
    # under 3 s: click's usage error (exit 2), naming the option and its bound
    r = subprocess.run([sys.executable, "-m", "fluxnode", "binder", "--webhook-port", "9443",
                        "--webhook-cert-lifetime", "1"], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 2 and r.stderr.endswith(
        "Error: Invalid value for '--webhook-cert-lifetime': 1.0 is not in the range x>=3.0.\n")
