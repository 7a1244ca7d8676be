"""The container side of the container_ssh role, run inside the training container with python3 (stdlib only).

    python3 container_ssh.py install < request.json   # files, host key, sshd
    python3 container_ssh.py pin < request.json       # known_hosts, then the master's proof

Everything the role wants in the container comes in one JSON request on stdin (the private key never appears in
a command line), each file is written only when its content or mode differs, and one JSON answer goes to stdout:
one `docker exec` per step instead of one per file.
"""

import json
import os
import subprocess
import sys
import time

SSHD_LOG = "/var/log/sshd-mtt-train-ops.log"


def write_if_different(path, content, mode):
    """Write `content` (ending in a newline) to `path` with `mode`, root-owned, unless it already is so; True when
    changed."""
    data = content.encode() if content.endswith("\n") else (content + "\n").encode()
    try:
        with open(path, "rb") as handle:
            same = handle.read() == data
        same = same and (os.stat(path).st_mode & 0o7777) == mode and os.stat(path).st_uid == 0
    except OSError:
        same = False
    if same:
        return False
    os.makedirs(os.path.dirname(path), exist_ok=True)
    temporary = f"{path}.mtt-train-ops.tmp"
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
    os.chmod(temporary, mode)
    os.chown(temporary, 0, 0)
    os.replace(temporary, path)
    return True


def sshd_pid(pid_file, config_path):
    """The pid of our sshd, or None. A pid file outlives a container restart, and the restarted container reuses
    low pids (this very process may get the old sshd's): the pid must be an sshd run with our config."""
    try:
        with open(pid_file) as handle:
            pid = int(handle.read().strip())
        if pid == os.getpid():
            return None
        with open(f"/proc/{pid}/comm") as handle:
            if handle.read().strip() != "sshd":
                return None
        # sshd rewrites its title: "sshd: /usr/sbin/sshd -f <config> ... [listener] ..."
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            if f" -f {config_path} ".encode() not in handle.read().replace(b"\0", b" ") + b" ":
                return None
        return pid
    except (OSError, ValueError):
        return None


def log_tail(lines=5):
    try:
        with open(SSHD_LOG, errors="replace") as handle:
            return " ".join(line.strip() for line in handle.readlines()[-lines:])
    except OSError:
        return ""


def start_sshd(config_path, pid_file):
    """Start sshd; (state, error). sshd daemonizes itself; a port taken shows only in its log."""
    test = subprocess.run(["/usr/sbin/sshd", "-t", "-f", config_path], capture_output=True, text=True)
    if test.returncode != 0:
        return "failed", f"the configuration is refused: {(test.stderr or test.stdout).strip()}"
    open(SSHD_LOG, "w").close()
    started = subprocess.run(["/usr/sbin/sshd", "-f", config_path, "-E", SSHD_LOG], capture_output=True, text=True)
    if started.returncode != 0:
        return "failed", (started.stderr.strip() + " " + log_tail()).strip()
    time.sleep(1)
    pid = sshd_pid(pid_file, config_path)
    with open(SSHD_LOG, errors="replace") as handle:
        bind_errors = [line.strip() for line in handle if "Bind to port" in line and "failed" in line]
    if pid is None or bind_errors:
        if pid is not None:
            os.kill(pid, 15)
        return "failed", " ".join(bind_errors[-2:]) or log_tail() or "sshd exited at once"
    return "started", ""


def install(request):
    os.makedirs("/run/sshd", exist_ok=True)
    os.makedirs("/root/.ssh", exist_ok=True)
    os.chmod("/root/.ssh", 0o700)
    changed = []
    host_key = "/etc/ssh/ssh_host_ed25519_key"
    if not os.path.exists(host_key) or os.path.getsize(host_key) == 0:
        subprocess.run(
            ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", host_key],
            check=True,
            input="y\n",
            capture_output=True,
            text=True,
        )
        changed.append(host_key)
    for item in request["files"]:
        if write_if_different(item["path"], item["content"], int(item["mode"], 8)):
            changed.append(item["path"])
    config_path, pid_file = request["config_path"], request["pid_file"]
    pid = sshd_pid(pid_file, config_path)
    state, error = "running", ""
    if pid is not None and (config_path in changed or host_key in changed):
        os.kill(pid, 15)
        for _ in range(50):
            if sshd_pid(pid_file, config_path) is None:
                break
            time.sleep(0.1)
        pid = None
    if pid is None:
        state, error = start_sshd(config_path, pid_file)
    with open(f"{host_key}.pub") as handle:
        public = " ".join(handle.read().split()[:2])
    return {"changed": changed, "sshd": state, "error": error, "host_key": public}


def pin(request):
    changed = []
    if write_if_different(request["known_hosts_path"], request["known_hosts"], 0o644):
        changed.append(request["known_hosts_path"])
    proofs = []
    for target in request["reach"]:
        argv = [
            "ssh",
            "-p",
            str(request["port"]),
            "-i",
            request["key_path"],
            "-o",
            "BatchMode=yes",
            "-o",
            "StrictHostKeyChecking=yes",
            "-o",
            f"UserKnownHostsFile={request['known_hosts_path']}",
            "-o",
            f"ConnectTimeout={request['connect_timeout']}",
            f"root@{target['addr']}",
            "hostname",
        ]
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=int(request["connect_timeout"]) + 20)
            proofs.append({**target, "rc": done.returncode, "out": done.stdout.strip(), "err": done.stderr.strip()})
        except subprocess.TimeoutExpired:
            proofs.append({**target, "rc": 124, "out": "", "err": "no answer within the connect timeout"})
    return {"changed": changed, "proofs": proofs}


if __name__ == "__main__":
    action = {"install": install, "pin": pin}[sys.argv[1]]
    json.dump(action(json.load(sys.stdin)), sys.stdout)
