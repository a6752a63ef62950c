"""The limits of SECURITY.md are broker attributes an operator can set (-S NAME=SIZE), each
checked when given and applied by a real broker."""

from __future__ import annotations

import errno
import subprocess
import sys

import pytest
import yaml
from fluxnode.agent.broker.client import RPCError
from fluxnode.scheduler.jobspec.builder import SlotKind, build_jobspec

from fluxnode.testing.instance import Instance


def jobspec_text() -> str:
    return yaml.safe_dump(build_jobspec([SlotKind(1, 0, 0, 1)]))


def test_jobspec_and_connector_limits_apply(tmp_path):
    text = jobspec_text()
    assert len(text) > 150
    attrs = {"jobspec.max-bytes": "150", "connector.max-message": "4k"}
    with Instance(2, tmp_path, modules=None, attrs=attrs) as inst:
        with pytest.raises(RPCError) as info:
            inst.rpc("sched.alloc", {"jobspec": text})
        assert info.value.errnum == errno.E2BIG, info.value
        assert "150" in info.value.errstr
        with pytest.raises(RPCError) as info:  # 8 KiB of padding: past the 4 KiB message limit
            inst.rpc("broker.ping", {"pad": "p" * 8192})
        assert info.value.errnum in (errno.EMSGSIZE, errno.ECONNRESET), info.value
        assert inst.rpc("broker.ping", {"pad": "p" * 1024})  # others are still served


def test_defaults_take_what_those_limits_refuse(tmp_path):
    with Instance(2, tmp_path, modules=None) as inst:
        assert inst.rpc("sched.alloc", {"jobspec": jobspec_text()})["status"] == "ALLOCATED"
        assert inst.rpc("broker.ping", {"pad": "p" * 8192})


@pytest.mark.parametrize("setting, problem", [
    ("connector.max-message=abc", "is not a positive size"),
    ("connector.input-budget=0", "is not a positive size"),
    ("jobspec.max-depth=8k", "is not a positive integer"),
    ("jobspec.max-nodes=-1", "is not a positive integer"),
    ("tbon.pending-per-address=0", "is not a positive integer"),
    ("tbon.fd-reserve=1M", "is not a positive integer"),
    # RFC 10 names sha1 and sha256 only; a worker builds its content store with its first
    # request, so the name is refused with the command line, not then
    ("content.hash=md5", "is not sha1 or sha256"),
])
def test_a_bad_limit_is_a_usage_error_naming_it(tmp_path, setting, problem):
    cfg = tmp_path / "broker.toml"
    cfg.write_text("[bootstrap]\n")
    out = subprocess.run([sys.executable, "-m", "fluxnode", "broker", "--config-path", str(cfg),
                          "-S", setting], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2, out
    assert setting.split("=")[0] in out.stderr and problem in out.stderr, out.stderr
