"""The node agent finds its API server and credential without the official client
(kubeconfig.py, issue 32), and hands what it does not read to the official loader."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import yaml
from fluxnode.agent.kube import kubeconfig
from fluxnode.agent.kube.agent_api import AgentApi
from fluxnode.agent.kube.api_error import ApiError, KubeConfigError
from fluxnode.agent.kube.kubeconfig import in_cluster, load_target
from fluxnode.agent.kube.rest import KubeRest


def names(target) -> list[str]:
    response = AgentApi(KubeRest(target)).list_node()
    try:
        return [n["metadata"]["name"] for n in json.loads(response.data)["items"]]
    finally:
        response.release_conn()


def write_config(kube, path, cluster: dict | None = None, user: dict | None = None):
    doc = yaml.safe_load(kube.kubeconfig_path.read_text())
    doc["clusters"][0]["cluster"].update(cluster or {})
    if user is not None:
        doc["users"][0]["user"] = user
    path.write_text(yaml.safe_dump(doc))
    return path


def test_the_emulators_kubeconfig_token_and_ca(kube):
    kube.add_node("n1")
    assert names(load_target(str(kube.kubeconfig_path))) == ["n1"]


def test_a_token_file_relative_to_the_kubeconfig(kube, tmp_path):
    kube.add_node("n1")
    (tmp_path / "token").write_text(kube.token + "\n")
    path = write_config(kube, tmp_path / "config", user={"tokenFile": "token"})
    assert names(load_target(str(path))) == ["n1"]


def test_a_wrong_token_is_the_servers_401(kube, tmp_path):
    path = write_config(kube, tmp_path / "config", user={"token": "not-the-token"})
    with pytest.raises(ApiError) as caught:
        names(load_target(str(path)))
    assert caught.value.status == 401


def test_a_ca_file_relative_to_the_kubeconfig_and_a_server_not_trusted_without_it(kube, tmp_path):
    kube.add_node("n1")
    (tmp_path / "ca.crt").write_bytes(kube.certs.ca_pem)
    path = write_config(kube, tmp_path / "config",
                        cluster={"certificate-authority-data": None,
                                 "certificate-authority": "ca.crt"})
    assert names(load_target(str(path))) == ["n1"]
    write_config(kube, path, cluster={"certificate-authority-data": None})
    with pytest.raises(Exception, match="CERTIFICATE_VERIFY_FAILED"):
        names(load_target(str(path)))
    write_config(kube, path, cluster={"certificate-authority-data": None,
                                      "insecure-skip-tls-verify": True})
    assert names(load_target(str(path))) == ["n1"]


def test_in_cluster_reads_the_service_account_and_its_rotated_token(kube, tmp_path, monkeypatch):
    kube.add_node("n1")
    account = tmp_path / "serviceaccount"
    account.mkdir()
    (account / "ca.crt").write_bytes(kube.certs.ca_pem)
    (account / "token").write_text("expired")
    url = urlsplit(kube.url)
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", url.hostname)
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", str(url.port))
    target = load_target(None, service_account=account)
    assert target.host == f"https://{url.hostname}:{url.port}"
    with pytest.raises(ApiError, match=r"\(401\)"):
        names(target)
    (account / "token").write_text(kube.token)
    monkeypatch.setattr(kubeconfig, "TOKEN_REREAD", 0.0)
    assert names(target) == ["n1"]


def test_in_cluster_without_the_service_account_is_a_config_error(tmp_path, monkeypatch):
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    with pytest.raises(KubeConfigError, match="ca.crt does not exist"):
        in_cluster(tmp_path)
    monkeypatch.delenv("KUBERNETES_SERVICE_PORT")
    with pytest.raises(KubeConfigError, match="Service host/port is not set"):
        in_cluster(tmp_path)


def test_a_missing_context_or_file_is_a_config_error(kube, tmp_path):
    doc = yaml.safe_load(kube.kubeconfig_path.read_text())
    doc["current-context"] = "elsewhere"
    (tmp_path / "config").write_text(yaml.safe_dump(doc))
    with pytest.raises(KubeConfigError, match="no context named 'elsewhere'"):
        load_target(str(tmp_path / "config"))
    with pytest.raises(KubeConfigError, match="cannot read kubeconfig"):
        load_target(str(tmp_path / "absent"))


def test_an_exec_credential_plugin_goes_through_the_official_loader(kube, tmp_path):
    kube.add_node("n1")
    credential = {"apiVersion": "client.authentication.k8s.io/v1beta1",
                  "kind": "ExecCredential", "status": {"token": kube.token}}
    plugin = tmp_path / "plugin.py"
    plugin.write_text(f"print({json.dumps(json.dumps(credential))})\n")
    path = write_config(kube, tmp_path / "config", user={"exec": {
        "apiVersion": "client.authentication.k8s.io/v1beta1",
        "command": sys.executable, "args": [str(plugin)]}})
    assert names(load_target(str(path))) == ["n1"]


def test_the_agent_command_imports_no_official_client():
    """The footprint this module exists for: `fluxnode agent` loads no ``kubernetes``."""
    code = ("import sys, fluxnode.commands.agent; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'kubernetes'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "[]"


def test_client_certificate_data_is_written_to_private_files(kube, tmp_path):
    """ssl takes a client certificate and key only as files: the -data fields are decoded into
    files only their owner reads, and the pool presents them."""
    path = write_config(kube, tmp_path / "config",
                        user={"client-certificate-data": base64.b64encode(b"CERT").decode(),
                              "client-key-data": base64.b64encode(b"KEY").decode()})
    settings = load_target(str(path)).pool.connection_pool_kw
    for field, content in (("cert_file", b"CERT"), ("key_file", b"KEY")):
        written = Path(settings[field])
        assert written.read_bytes() == content
        assert written.stat().st_mode & 0o077 == 0
        written.unlink()
