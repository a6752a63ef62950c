"""A TCP endpoint's port is checked when broker.toml is read: ZeroMQ takes a port past
65535 modulo 2**16, so `tcp://127.0.0.1:99999` passed `config check` and the broker bound
another port (34463) without a word."""

from __future__ import annotations

import subprocess
import sys

import pytest
from fluxnode.broker_conf import config

HOSTS = '[[bootstrap.hosts]]\nhost = "a0"\n'


@pytest.mark.parametrize("table, key, value, problem", [
    ("bootstrap", "default_bind", "tcp://127.0.0.1:99999", "port 99999 is outside 1-65535"),
    ("bootstrap", "default_connect", "tcp://h:0", "port 0 is outside 1-65535"),
    ("bootstrap", "default_bind", "tcp://h:http", "port 'http' is not a number"),
    ("bootstrap", "default_bind", "tcp://h", "expected tcp://HOST:PORT"),
])
def test_a_bad_port_is_an_error_naming_the_key(table, key, value, problem):
    text = f'[{table}]\n{key} = "{value}"\n' + HOSTS
    with pytest.raises(config.ConfigError) as info:
        config.loads(text, "broker.toml")
    assert info.value.key == f"{table}.{key}" and problem in str(info.value), str(info.value)


def test_a_host_entry_port_is_checked_too():
    text = '[bootstrap]\n[[bootstrap.hosts]]\nhost = "a0"\nbind = "tcp://0.0.0.0:70000"\n'
    with pytest.raises(config.ConfigError) as info:
        config.loads(text, "broker.toml")
    assert info.value.key == "bootstrap.hosts[0].bind", str(info.value)
    assert "port 70000 is outside 1-65535" in str(info.value)


@pytest.mark.parametrize("value", ["tcp://h:1", "tcp://h:65535", "tcp://%h:%p", "tcp://*:*",
                                   "tcp://[::1]:8050", "ipc:///run/x.sock"])
def test_good_endpoints_pass(value):
    text = f'[bootstrap]\ndefault_port = 8050\ndefault_bind = "{value}"\n' + HOSTS
    assert config.loads(text).bootstrap.default_bind == value


def test_config_check_refuses_it(tmp_path):
    f = tmp_path / "broker.toml"
    f.write_text('[bootstrap]\ndefault_bind = "tcp://127.0.0.1:99999"\n' + HOSTS)
    out = subprocess.run([sys.executable, "-m", "fluxnode", "config", "check", str(f)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode != 0 and "Traceback" not in out.stderr
    assert "bootstrap.default_bind" in out.stderr and "outside 1-65535" in out.stderr, out.stderr
