"""container_ssh.py, the container side of the container_ssh role: files written only when they differ, and an
sshd pid file trusted only when it names a running sshd with our config (processes of this machine)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from trainops.node import container_ssh

ROOT = Path(__file__).resolve().parents[2]

CONFIG = "/etc/ssh/sshd_config_mtt_train_ops"
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="writes root-owned files")


@needs_root
def test_a_file_is_written_once_then_left_alone_until_content_or_mode_differ(tmp_path):
    path = str(tmp_path / "ssh" / "authorized_keys")
    assert container_ssh.write_if_different(path, "ssh-ed25519 AAAA key", 0o600)
    assert Path(path).read_text() == "ssh-ed25519 AAAA key\n"  # a newline is added to a key file
    assert oct(os.stat(path).st_mode & 0o7777) == "0o600"
    assert not container_ssh.write_if_different(path, "ssh-ed25519 AAAA key\n", 0o600)
    os.chmod(path, 0o644)
    assert container_ssh.write_if_different(path, "ssh-ed25519 AAAA key", 0o600)
    assert oct(os.stat(path).st_mode & 0o7777) == "0o600"
    assert container_ssh.write_if_different(path, "ssh-ed25519 BBBB other", 0o600)
    assert Path(path).read_text() == "ssh-ed25519 BBBB other\n"
    assert sorted(p.name for p in (tmp_path / "ssh").iterdir()) == ["authorized_keys"]


def test_a_pid_file_naming_this_process_is_not_a_running_sshd(tmp_path):
    pid_file = tmp_path / "sshd.pid"
    pid_file.write_text(f"{os.getpid()}\n")
    assert container_ssh.sshd_pid(str(pid_file), CONFIG) is None


def test_a_pid_file_naming_another_program_with_the_config_in_its_command_line_is_not_sshd(tmp_path):
    """After a container restart, the old pid may belong to anything, even a process naming our config."""
    decoy = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "-f", CONFIG, "x"])
    try:
        pid_file = tmp_path / "sshd.pid"
        pid_file.write_text(f"{decoy.pid}\n")
        deadline = time.monotonic() + 10  # until the child has exec'd (its cmdline is ours before)
        while f" -f {CONFIG} " not in Path(f"/proc/{decoy.pid}/cmdline").read_bytes().replace(b"\0", b" ").decode():
            assert time.monotonic() < deadline, "the decoy did not start"
            time.sleep(0.05)
        assert container_ssh.sshd_pid(str(pid_file), CONFIG) is None
    finally:
        decoy.kill()
        decoy.wait()


def test_a_missing_or_garbled_pid_file_is_no_sshd(tmp_path):
    assert container_ssh.sshd_pid(str(tmp_path / "absent.pid"), CONFIG) is None
    (tmp_path / "bad.pid").write_text("not a pid")
    assert container_ssh.sshd_pid(str(tmp_path / "bad.pid"), CONFIG) is None
