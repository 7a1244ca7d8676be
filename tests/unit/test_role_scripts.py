"""The programs the roles run in the training containers (the node package's, trainops/node/*.py), run here
exactly as the roles run them: ``python3 <the program's path> --named arguments``, on this machine's processes and
files."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest
from trainops.dataset_manifest import written_size_problems

ROOT = Path(__file__).resolve().parents[2]


#: The node programs in this checkout (installed in the containers as /opt/mtt-train-ops/<version>/trainops/node).
PROGRAMS = ROOT / "plugins" / "module_utils" / "trainops" / "node"


def run(script: str, *args: str, stdin: str = "", env: dict | None = None, timeout: float = 60):
    return subprocess.run(
        [sys.executable, str(PROGRAMS / script), *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# collect: pack_logs.py


def test_pack_logs_packs_the_nodes_logs_with_its_launch_output_and_exit_status(tmp_path):
    run_dir = tmp_path / "run"
    (run_dir / "logs" / "node1" / "flight").mkdir(parents=True)
    (run_dir / "logs" / "node1" / "rank0.log").write_text("iteration 1\n")
    (run_dir / "logs" / "node1" / "flight" / "dump").write_text("x")
    (run_dir / "logs" / "launch-node1.out").write_text("started\n")
    (run_dir / "exit").mkdir()
    (run_dir / "exit" / "node1.rc").write_text("0\n")
    pack = tmp_path / "pack.tgz"
    done = run("pack_logs.py", "--run-dir", str(run_dir), "--node", "node1", "--pack", str(pack))
    assert done.returncode == 0, done.stderr
    with tarfile.open(pack) as tar:
        names = sorted(tar.getnames())
    assert names == ["node1/exit.rc", "node1/flight", "node1/flight/dump", "node1/launch.out", "node1/rank0.log"]
    assert not (tmp_path / "pack.tgz.tmp").exists()


def test_pack_logs_adds_the_runs_tensorboard_files_at_the_packs_root_for_every_node_to_share(tmp_path):
    run_dir = tmp_path / "run"
    (run_dir / "logs" / "node2").mkdir(parents=True)
    (run_dir / "logs" / "node2" / "rank3.log").write_text("iteration 1\n")
    board = run_dir / "tensorboard"
    (board / "sub").mkdir(parents=True)
    (board / "events.out.tfevents.1.node2.7.0").write_bytes(b"attempt 1")
    (board / "events.out.tfevents.9.node2.8.0").write_bytes(b"attempt 2")
    (board / "sub" / "events.out.tfevents.3.node2.9.0").write_bytes(b"x")
    pack = tmp_path / "pack.tgz"
    argv = ["--run-dir", str(run_dir), "--node", "node2", "--pack", str(pack), "--tensorboard-dir", str(board)]
    assert run("pack_logs.py", *argv).returncode == 0
    with tarfile.open(pack) as tar:
        names = sorted(tar.getnames())
        first = tar.extractfile("tensorboard/events.out.tfevents.1.node2.7.0").read()
    written = ["events.out.tfevents.1.node2.7.0", "events.out.tfevents.9.node2.8.0"]
    written.append("sub/events.out.tfevents.3.node2.9.0")
    assert names == ["node2/rank3.log", *(f"tensorboard/{name}" for name in written)]
    assert first == b"attempt 1"
    # a run whose image writes no TensorBoard files (no tensorboard package) packs its logs as before
    argv[-1] = str(tmp_path / "none")
    assert run("pack_logs.py", *argv).returncode == 0


def test_pack_logs_writes_no_empty_pack_for_a_node_whose_launch_did_not_start(tmp_path):
    (tmp_path / "run").mkdir()
    pack = tmp_path / "node2.tgz"
    done = run("pack_logs.py", "--run-dir", str(tmp_path / "run"), "--node", "node2", "--pack", str(pack))
    assert done.returncode == 3 and "its launch did not start" in done.stderr and not pack.exists()


def test_pack_logs_names_a_missing_run_directory(tmp_path):
    done = run("pack_logs.py", "--run-dir", str(tmp_path / "gone"), "--node", "n", "--pack", "/tmp/x.tgz")
    assert done.returncode == 2
    assert f"the run directory {tmp_path / 'gone'} does not exist" in done.stderr


def test_pack_logs_requires_its_named_arguments():
    done = run("pack_logs.py", "--node", "n")
    assert done.returncode == 2 and "--run-dir" in done.stderr


# launch: write_run_files.py


def test_write_run_files_writes_each_file_whole_with_scripts_executable(tmp_path):
    files = {"plan.json": "{}", "launch-node1.sh": "#!/bin/bash\n", "sub/smoke.py": "print(1)\n"}
    done = run("write_run_files.py", "--run-dir", str(tmp_path), stdin=json.dumps(files))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "3"
    assert (tmp_path / "plan.json").read_text() == "{}"
    assert oct((tmp_path / "launch-node1.sh").stat().st_mode & 0o777) == "0o755"
    assert oct((tmp_path / "plan.json").stat().st_mode & 0o777) == "0o644"
    assert (tmp_path / "sub" / "smoke.py").is_file() and (tmp_path / "logs").is_dir()
    assert not list(tmp_path.rglob("*.tmp"))


def test_write_run_files_refuses_a_busy_node_naming_the_controllers_commands(tmp_path):
    """A launch of this bundle that started on the node after the idle check: refused, with the stop and status
    command lines the controller gives (its -i), and nothing written."""
    work_home = tmp_path / "work"
    run_dir = work_home / "runs" / "exp" / "20261204-000000"
    (run_dir / "pids").mkdir(parents=True)
    sleeper = subprocess.Popen(
        ["sleep", "30"], env={**os.environ, "MTT_TRAIN_OPS_RUN": str(run_dir)}, start_new_session=True
    )
    try:
        (run_dir / "pids" / "node1.pid").write_text(f"{sleeper.pid}\n")
        files = {"plan.json": "{}"}
        new_run = tmp_path / "new-run"
        done = run(
            "write_run_files.py", "--run-dir", str(new_run), "--node", "node1",
            "--work-home", str(work_home), "--stop-command", "ansible-playbook -i inventory/site stop.yml",
            "--status-command", "ansible-playbook -i inventory/site playbooks/status.yml",
            stdin=json.dumps(files),
        )  # fmt: skip
    finally:
        sleeper.kill()
        sleeper.wait()
    assert done.returncode == 3, done.stderr
    assert "node1: a job is running" in done.stderr and "`ansible-playbook -i inventory/site stop.yml`" in done.stderr
    assert not new_run.exists()


@pytest.mark.parametrize("name", ["../escape.sh", "/etc/passwd"])
def test_write_run_files_refuses_names_outside_the_run_directory(tmp_path, name):
    done = run("write_run_files.py", "--run-dir", str(tmp_path / "run"), stdin=json.dumps({name: "x"}))
    assert done.returncode == 2 and "outside the run directory" in done.stderr
    assert not (tmp_path / "escape.sh").exists()


def test_write_run_files_refuses_a_node_where_a_launch_still_runs_writing_nothing(tmp_path):
    work_home = tmp_path / "home"
    busy = work_home / "runs" / "other" / "r1"
    (busy / "pids").mkdir(parents=True)
    env = dict(os.environ, MTT_TRAIN_OPS_RUN=str(busy))  # the launch script's mark, which its ranks inherit
    sleeper = subprocess.Popen(["setsid", "sleep", "60"], env=env, stdin=subprocess.DEVNULL)
    try:
        assert wait_for_pgid(sleeper.pid)
        (busy / "pids" / "node1.pid").write_text(f"{sleeper.pid}\n")
        files = {"a.sh": ""}
        run_dir = work_home / "runs" / "new" / "r2"
        args = ["--run-dir", str(run_dir), "--node", "node1", "--work-home", str(work_home)]
        done = run("write_run_files.py", *args, stdin=json.dumps(files))
        assert done.returncode == 3 and not run_dir.exists(), done.stderr
        assert f"node1: a job is running: run 'other/r1' (process group {sleeper.pid}" in done.stderr
        assert "stop.yml" in done.stderr
    finally:
        sleeper.kill()
        sleeper.wait()
    assert run("write_run_files.py", *args, stdin=json.dumps(files)).returncode == 0
    assert (run_dir / "a.sh").is_file()


def wait_for_pgid(pid: int, timeout: float = 10) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if os.getpgid(pid) == pid:
                return True
        except ProcessLookupError:
            return False
        time.sleep(0.05)
    return False


# dataset: measure.py


def test_measure_sizes_the_dataset_pair_and_a_tokenizer_directory(tmp_path):
    (tmp_path / "ds.bin").write_bytes(b"x" * 10)
    (tmp_path / "tok").mkdir()
    (tmp_path / "tok" / "a.json").write_bytes(b"y" * 3)
    (tmp_path / "tok" / "b.model").write_bytes(b"z" * 4)
    done = run("measure.py", "--data-path", str(tmp_path / "ds"), "--tokenizer-path", str(tmp_path / "tok"))
    assert done.returncode == 0, done.stderr
    measured = json.loads(done.stdout)
    sizes = {str(tmp_path / "ds.bin"): 10, str(tmp_path / "ds.idx"): None, str(tmp_path / "tok"): 7}
    assert measured == {"sizes": sizes, "manifest": None, "data_path_is_directory": False}
    # with data.yml's manifest, its output part (what was written) comes too; a manifest cut short reads as none
    (tmp_path / "ds.manifest.json").write_text(json.dumps({"output": {"bin_bytes": 12, "idx_bytes": 5}}))
    done = run("measure.py", "--data-path", str(tmp_path / "ds"), "--tokenizer-path", str(tmp_path / "tok"))
    assert json.loads(done.stdout)["manifest"] == {"bin_bytes": 12, "idx_bytes": 5}
    problems = written_size_problems("node2", str(tmp_path / "ds"), sizes, {"bin_bytes": 12, "idx_bytes": 5})
    assert problems == [
        f"node2: {tmp_path / 'ds.bin'} is 10 bytes, but its manifest ({tmp_path / 'ds'}.manifest.json) says data.yml "
        "wrote 12: a copy that did not finish, or another dataset under the same prefix; copy the .bin/.idx and the "
        "manifest again from one source (or run playbooks/data.yml)"
    ]  # the missing .idx is the missing-file refusal's
    (tmp_path / "ds.manifest.json").write_text('{"output": {"bin_')
    done = run("measure.py", "--data-path", str(tmp_path / "ds"), "--tokenizer-path", str(tmp_path / "tok"))
    assert json.loads(done.stdout)["manifest"] is None


# collective: allreduce_perf.py


@pytest.fixture
def fake_test(tmp_path):
    """An executable that prints its arguments, in place of all_reduce_perf."""
    path = tmp_path / "all_reduce_perf"
    path.write_text('#!/bin/sh\necho "args: $*"\n')
    path.chmod(0o755)
    return path


def test_allreduce_perf_runs_the_sweep_on_this_nodes_cards(fake_test):
    done = run("allreduce_perf.py", "--test", str(fake_test), "--max-bytes", "1G", "--gpus", "8",
               "--timeout", "30")  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "args: -b 8 -e 1G -f 2 -g 8 -c 1"


def test_allreduce_perf_exits_127_without_the_test_binary(tmp_path):
    done = run("allreduce_perf.py", "--test", str(tmp_path / "none"), "--max-bytes", "1G", "--gpus",
               "8", "--timeout", "30")  # fmt: skip
    assert done.returncode == 127 and "no executable all_reduce_perf" in done.stderr


def test_allreduce_perf_across_nodes_exits_126_without_mpirun(fake_test, tmp_path):
    (tmp_path / "bin").mkdir()
    for tool in ("timeout", "sh"):
        os.symlink(
            subprocess.check_output(["sh", "-c", f"command -v {tool}"], text=True).strip(), tmp_path / "bin" / tool
        )
    done = run("allreduce_perf.py", "--test", str(fake_test), "--max-bytes", "1G", "--gpus", "8",
               "--timeout", "30", "--hosts", "10.0.0.1,10.0.0.2", env={"PATH": str(tmp_path / "bin")})  # fmt: skip
    assert done.returncode == 126 and "no mpirun" in done.stderr


def test_allreduce_perf_across_nodes_runs_mpirun_over_the_containers_sshd(fake_test, tmp_path):
    (tmp_path / "bin").mkdir()
    mpirun = tmp_path / "bin" / "mpirun"
    mpirun.write_text('#!/bin/sh\necho "mpirun $*"\n')
    mpirun.chmod(0o755)
    done = run("allreduce_perf.py", "--test", str(fake_test), "--max-bytes", "1G", "--gpus", "8",
               "--timeout", "30", "--hosts", "10.0.0.1,10.0.0.2", "--ssh-port", "2299", "--ssh-key", "/k",
               env={"PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}"})  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == (
        "mpirun --allow-run-as-root -np 2 -H 10.0.0.1:1,10.0.0.2:1 --bind-to none -mca plm_rsh_args "
        f"-p 2299 -i /k -o BatchMode=yes -o StrictHostKeyChecking=yes -x PATH -x LD_LIBRARY_PATH {fake_test} "
        "-b 8 -e 1G -f 2 -g 8 -c 1"
    )


# network: port_probe.py node


def test_port_probe_node_master_serves_a_worker_that_reaches_it():
    port = _free_port()
    master = run("port_probe.py", "node", "--role", "master", "--port", str(port), "--master-addr", "-",
                 "--timeout", "5", "--listen-seconds", "10", "--probes", "1", "--names", "localhost")  # fmt: skip
    assert master.returncode == 0, master.stderr
    assert json.loads(master.stdout)["probe_error"] is None
    worker = run("port_probe.py", "node", "--role", "worker", "--port", str(port),
                 "--master-addr", "127.0.0.1", "--timeout", "5", "--listen-seconds", "10", "--probes", "0",
                 "--names", "localhost")  # fmt: skip
    assert worker.returncode == 0, worker.stderr
    report = json.loads(worker.stdout)
    assert report["probe_error"] is None and report["target"] == f"127.0.0.1:{port}"


def test_port_probe_node_master_exits_3_when_its_port_is_taken():
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        done = run("port_probe.py", "node", "--role", "master", "--port", str(port), "--master-addr", "-",
                   "--timeout", "1", "--listen-seconds", "1", "--probes", "1")  # fmt: skip
    assert done.returncode == 3 and f"port {port} is in use" in done.stdout


def test_port_probe_node_worker_names_a_master_that_does_not_answer():
    port = _free_port()
    done = run("port_probe.py", "node", "--role", "worker", "--port", str(port), "--master-addr",
               "127.0.0.1", "--timeout", "1", "--listen-seconds", "1", "--probes", "0")  # fmt: skip
    assert done.returncode == 0
    assert json.loads(done.stdout)["probe_error"]


# data_build: build_job.py


def _builder(directory: Path, body: str) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "build_dataset.py").write_text(body)


def _wait_for_rc(directory: Path, limit: float = 30) -> dict:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        polled = json.loads(run("build_job.py", "poll", "--dir", str(directory)).stdout)
        if polled["rc"] is not None:
            return polled
        time.sleep(0.2)
    raise AssertionError("the build did not end")


def test_build_job_starts_detached_reports_progress_and_the_outcome(tmp_path):
    _builder(tmp_path, "import json, sys\n"
             "json.dump({'state': 'done', 'tokens': 7}, open(sys.argv[2], 'w'))\n"
             "print('args', sys.argv[3:])\n")  # fmt: skip
    started = time.monotonic()
    done = run(
        "build_job.py",
        "start",
        "--dir",
        str(tmp_path),
        "--builder",
        str(tmp_path / "build_dataset.py"),
        "--",
        "--input",
        "/x",
    )
    assert done.returncode == 0, done.stderr
    assert time.monotonic() - started < 10
    polled = _wait_for_rc(tmp_path)
    assert polled == {"rc": 0, "progress": {"state": "done", "tokens": 7}}
    outcome = json.loads(run("build_job.py", "outcome", "--dir", str(tmp_path)).stdout)
    assert outcome == {"rc": 0, "error": "", "tail": ["args ['--input', '/x']"]}


def test_build_job_outcome_names_the_builders_error(tmp_path):
    _builder(tmp_path, "print('working')\nprint('ERROR: input /x does not exist')\nraise SystemExit(3)\n")
    assert (
        run("build_job.py", "start", "--dir", str(tmp_path), "--builder", str(tmp_path / "build_dataset.py")).returncode
        == 0
    )
    assert _wait_for_rc(tmp_path)["rc"] == 3
    outcome = json.loads(run("build_job.py", "outcome", "--dir", str(tmp_path)).stdout)
    assert outcome["rc"] == 3 and outcome["error"] == "input /x does not exist"


def test_build_job_refuses_a_second_build_of_the_same_output(tmp_path):
    _builder(tmp_path, "import time\ntime.sleep(30)\n")
    assert (
        run("build_job.py", "start", "--dir", str(tmp_path), "--builder", str(tmp_path / "build_dataset.py")).returncode
        == 0
    )
    deadline = time.monotonic() + 10
    while not (tmp_path / "pid").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    pid = int((tmp_path / "pid").read_text())
    try:
        again = run("build_job.py", "start", "--dir", str(tmp_path), "--builder", str(tmp_path / "build_dataset.py"))
        assert again.returncode == 9
        assert f"already running (pid {pid}, log {tmp_path / 'log'})" in again.stderr
    finally:
        os.killpg(pid, 9)


# collect: pack_logs.py --set-aside (train.yml's restarts)


def test_pack_logs_sets_an_attempts_logs_aside_for_the_next(tmp_path):
    run_dir = tmp_path / "run"
    (run_dir / "logs" / "node2" / "x_abc" / "attempt_0" / "1").mkdir(parents=True)
    (run_dir / "logs" / "node2" / "x_abc" / "attempt_0" / "1" / "stdout.log").write_text("iteration 3\n")
    (run_dir / "logs" / "launch-node2.out").write_text("started\n")
    (run_dir / "logs" / "node1").mkdir()
    (run_dir / "exit").mkdir()
    (run_dir / "exit" / "node2.rc").write_text("1\n")
    (run_dir / "pids").mkdir()
    (run_dir / "pids" / "node2.pid").write_text("2760\n")  # the next attempt's probe must not read this group
    target = run_dir / "attempt-1"
    done = run("pack_logs.py", "--run-dir", str(run_dir), "--node", "node2", "--set-aside", str(target))
    assert done.returncode == 0, done.stderr
    moved = ["logs/node2", "logs/launch-node2.out", "exit/node2.rc", "pids/node2.pid"]
    assert json.loads(done.stdout)["moved"] == moved
    assert not (run_dir / "pids" / "node2.pid").exists()
    assert (target / "logs" / "node2" / "x_abc" / "attempt_0" / "1" / "stdout.log").read_text() == "iteration 3\n"
    assert sorted(p.name for p in (run_dir / "logs").iterdir()) == ["node1"]
    assert not (run_dir / "exit" / "node2.rc").exists()


# collect: pack_logs.py's marks (the checkpoint an attempt left, the restart mark)


def test_pack_logs_on_the_master_adds_the_checkpoint_and_the_restart_mark(tmp_path):
    run_dir, ckpt = tmp_path / "run", tmp_path / "ckpt"
    (run_dir / "logs").mkdir(parents=True)
    ckpt.mkdir()
    (run_dir / "logs" / "launch-node1.out").write_text("started\n")
    args = ["--run-dir", str(run_dir), "--node", "node1", "--pack", str(tmp_path / "p.tgz"), "--checkpoint-dir"]
    assert run("pack_logs.py", *args, str(ckpt)).returncode == 0
    with tarfile.open(tmp_path / "p.tgz") as tar:
        assert json.load(tar.extractfile("node1/marks.json")) == {"checkpoint": "", "restarting": False}
    (ckpt / "latest_checkpointed_iteration.txt").write_text("15\n")
    (run_dir / "restarting").write_text("x")
    assert run("pack_logs.py", *args, str(ckpt)).returncode == 0
    with tarfile.open(tmp_path / "p.tgz") as tar:
        assert json.load(tar.extractfile("node1/marks.json")) == {"checkpoint": "15", "restarting": True}
    # set aside before the next attempt, the mark is read again: stop.yml may have removed it meanwhile
    (run_dir / "restarting").unlink()
    aside = run("pack_logs.py", "--run-dir", str(run_dir), "--node", "node1", "--set-aside",
                str(run_dir / "attempt-1"))  # fmt: skip
    assert json.loads(aside.stdout) == {"moved": ["logs/node1", "logs/launch-node1.out"], "restarting": False}


# checkpoints: checkpoint_scan.py


def _torch_dist_save(directory: Path, shards: dict[str, int]) -> None:
    """A save in torch_dist's layout: shard files, and a ``.metadata`` pickled as torch pickles its index (classes
    of ``torch.distributed.checkpoint.metadata``, here stand-ins of that module, which the scan never imports)."""
    import dataclasses
    import pickle
    import types

    module = types.ModuleType("dcp_metadata_standin")  # torch.distributed.checkpoint.metadata in a real save

    @dataclasses.dataclass(frozen=True)
    class MetadataIndex:
        fqn: str
        offset: object = None
        index: int | None = None

    @dataclasses.dataclass
    class _StorageInfo:
        relative_path: str
        offset: int
        length: int

    @dataclasses.dataclass
    class Metadata:
        state_dict_metadata: dict
        planner_data: object = None
        storage_data: object = None

    for cls in (MetadataIndex, _StorageInfo, Metadata):
        cls.__module__, cls.__qualname__ = module.__name__, cls.__name__
        setattr(module, cls.__name__, cls)
    sys.modules[module.__name__] = module
    try:
        storage, data = {}, {}
        for name, size in shards.items():
            half = size // 2
            storage[MetadataIndex(f"{name}.a")] = _StorageInfo(name, 0, half)
            storage[MetadataIndex(f"{name}.b")] = _StorageInfo(name, half, size - half)
            data[name] = os.urandom(size)
        directory.mkdir(parents=True)
        (directory / ".metadata").write_bytes(pickle.dumps(Metadata({"x": 1}, None, storage)))
    finally:
        del sys.modules[module.__name__]
    for name, blob in data.items():
        (directory / name).write_bytes(blob)
    (directory / "common.pt").write_bytes(b"common")
    (directory / "metadata.json").write_text('{"sharded_backend": "torch_dist"}')


def test_checkpoint_scan_reads_each_save_and_its_index_without_torch(tmp_path):
    _torch_dist_save(tmp_path / "iter_0000005", {"__0_0.distcp": 70000, "__1_0.distcp": 50000})
    _torch_dist_save(tmp_path / "iter_0000010", {"__0_0.distcp": 70000, "__1_0.distcp": 50000})
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("10\n")
    (tmp_path / "data-cache").mkdir()
    with open(tmp_path / "iter_0000010" / "__1_0.distcp", "r+b") as handle:
        handle.truncate(1234)
    done = run("checkpoint_scan.py", "scan", str(tmp_path))
    assert done.returncode == 0, done.stderr
    listing = json.loads(done.stdout)
    assert listing["tracker"] == "10" and listing["free_bytes"] > 0
    first, second = listing["saves"]
    assert (first["name"], first["iteration"]) == ("iter_0000005", 5)
    assert first["needed"] == {"__0_0.distcp": 70000, "__1_0.distcp": 50000}
    assert second["files"]["__1_0.distcp"] == 1234 and first["fingerprint"] != second["fingerprint"]
    # a copy has the same fingerprint; --skip lists a save by name alone
    import shutil

    shutil.rmtree(tmp_path / "iter_0000010")
    shutil.copytree(tmp_path / "iter_0000005", tmp_path / "iter_0000010")
    again = json.loads(run("checkpoint_scan.py", "scan", str(tmp_path), "--skip", "5").stdout)
    assert again["saves"][0] == {"name": "iter_0000005", "iteration": 5, "partial": True}
    assert again["saves"][1]["fingerprint"] == first["fingerprint"]
    (tmp_path / "iter_0000010" / ".metadata").write_bytes(b"\x80\x04garbage")
    broken = json.loads(run("checkpoint_scan.py", "scan", str(tmp_path)).stdout)
    assert "index_error" in broken["saves"][1] and "needed" not in broken["saves"][1]


def _common_pt(path: Path, args: dict) -> None:
    """A ``common.pt`` as torch.save writes one (a zip whose ``<name>/data.pkl`` pickles the state with protocol 2,
    tensors as persistent ids of storages in ``<name>/data/N``), holding Megatron's ``args`` Namespace with a
    torch dtype and an enum in it, and an rng tensor; written with stand-ins of torch's classes (no torch here)."""
    import argparse
    import enum
    import io
    import pickle
    import types
    import zipfile

    torch = types.ModuleType("torch")
    utils = types.ModuleType("torch._utils")
    enums = types.ModuleType("megatron.core.transformer.enums")

    class bfloat16:  # noqa: N801 - torch's name
        pass

    class AttnBackend(enum.Enum):
        auto = 5

    class Storage:
        pass

    class Tensor:
        def __reduce__(self):
            return (utils._rebuild_tensor_v2, (Storage(), 0, (4,), (1,), False, {}))

    def _rebuild_tensor_v2(*args):
        raise AssertionError("never called while writing")

    for module, obj in ((torch, bfloat16), (enums, AttnBackend), (utils, _rebuild_tensor_v2)):
        obj.__module__, obj.__qualname__ = module.__name__, obj.__name__
        setattr(module, obj.__name__, obj)

    class Pickler(pickle.Pickler):
        def persistent_id(self, obj):
            return ("storage", bfloat16, "0", "cpu", 4) if isinstance(obj, Storage) else None

    namespace = argparse.Namespace(**args, params_dtype=bfloat16, attention_backend=AttnBackend.auto)
    state = {"args": namespace, "checkpoint_version": 3.0, "iteration": 10, "rng_state": [{"cpu": Tensor()}]}
    parents = {name: types.ModuleType(name) for name in ("megatron", "megatron.core", "megatron.core.transformer")}
    standins = {"torch": torch, "torch._utils": utils, enums.__name__: enums, **parents}
    saved = {name: sys.modules.get(name) for name in standins}
    sys.modules.update(standins)
    try:
        buffer = io.BytesIO()
        Pickler(buffer, protocol=2).dump(state)
    finally:
        for name, module in saved.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("common/data.pkl", buffer.getvalue())
        archive.writestr("common/data/0", b"\0" * 8)
        archive.writestr("common/version", "3\n")


def test_checkpoint_scan_reads_the_arguments_megatron_recorded_without_torch(tmp_path):
    fixture = Path(__file__).resolve().parents[1] / "fixtures" / "checkpoints" / "megatron-tiny-saved-args.json"
    recorded = json.loads(fixture.read_text())["args"]
    args = {k: v for k, v in recorded.items() if k not in ("params_dtype", "attention_backend")}
    for iteration in (5, 10):
        _torch_dist_save(tmp_path / f"iter_{iteration:07d}", {"__0_0.distcp": 1000})
    _common_pt(tmp_path / "iter_0000010" / "common.pt", args)
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("10\n")
    done = run("checkpoint_scan.py", "scan", str(tmp_path), "--args")
    assert done.returncode == 0, done.stderr
    first, newest = json.loads(done.stdout)["saves"]
    assert "args" not in first and "args_error" not in first  # only the newest save's
    assert newest["args"]["seq_length"] == 128 and newest["args"]["num_query_groups"] == 4
    assert newest["args"]["params_dtype"] == "torch.bfloat16"
    assert newest["args"]["attention_backend"] == "megatron.core.transformer.enums.AttnBackend(5)"
    assert {k: newest["args"][k] for k in args} == args
    (tmp_path / "iter_0000010" / "common.pt").write_bytes(b"common")  # not a zip: named, not fatal
    broken = json.loads(run("checkpoint_scan.py", "scan", str(tmp_path), "--args").stdout)
    assert broken["saves"][1]["args_error"].startswith("common.pt: BadZipFile")


def test_checkpoint_scan_lists_and_adopts_the_old_style_directory(tmp_path):
    old, new = tmp_path / "tp1_pp2", tmp_path / "tiny-abc123_seq128_fp32_tp1_pp2"
    _torch_dist_save(old / "iter_0000005", {"__0_0.distcp": 1000})
    (old / "latest_checkpointed_iteration.txt").write_text("5\n")
    (new / "data-cache").mkdir(parents=True)  # a launch that never saved made it
    listed = json.loads(run("checkpoint_scan.py", "scan", str(new), "--legacy", str(old)).stdout)
    assert listed["dir"] == str(old) and listed["legacy_of"] == str(new) and listed["tracker"] == "5"
    done = run("checkpoint_scan.py", "adopt", str(old), str(new))
    assert json.loads(done.stdout)["moved"] == ["iter_0000005", "latest_checkpointed_iteration.txt"], done.stderr
    assert not old.exists() and (new / "iter_0000005" / ".metadata").is_file() and (new / "data-cache").is_dir()
    again = json.loads(run("checkpoint_scan.py", "adopt", str(old), str(new)).stdout)
    assert again["moved"] == []  # a peer on shared storage moved it
    _torch_dist_save(old / "iter_0000005", {"__0_0.distcp": 1000})
    kept = json.loads(run("checkpoint_scan.py", "scan", str(new), "--legacy", str(old)).stdout)
    assert kept["dir"] == str(new) and "legacy_of" not in kept  # the new directory has saves: the old is not read
    gone = tmp_path / "fresh"
    whole = json.loads(run("checkpoint_scan.py", "adopt", str(old), str(gone)).stdout)
    assert whole["moved"] == [str(old)] and (gone / "iter_0000005").is_dir()


def test_checkpoint_scan_sets_aside_and_removes_only_saves_never_the_trackers(tmp_path):
    for iteration in (5, 10, 15):
        (tmp_path / f"iter_{iteration:07d}").mkdir()
        (tmp_path / f"iter_{iteration:07d}" / "smoke.pt").write_bytes(b"x" * iteration)
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("15\n")
    done = run("checkpoint_scan.py", "resume", str(tmp_path), "--tag", "attempt-2", "--tracker", "10",
               "--set-aside", "iter_0000015")  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["moved"] == [str(tmp_path / "set-aside" / "iter_0000015.attempt-2")]
    assert (tmp_path / "latest_checkpointed_iteration.txt").read_text() == "10\n"
    assert (tmp_path / "set-aside" / "iter_0000015.attempt-2" / "smoke.pt").is_file()
    bad = run("checkpoint_scan.py", "resume", str(tmp_path), "--tag", "t", "--set-aside", "../etc")
    assert bad.returncode != 0 and "is not a save's name" in bad.stderr
    ledger = str(tmp_path / "run" / "checkpoints.json")
    request = {
        "remove": ["iter_0000005", "iter_0000010", "data-cache", "../x"],
        "ledger": {"saves": []},
        "ledger_path": ledger,
    }
    removed = run("checkpoint_scan.py", "apply", str(tmp_path), stdin=json.dumps(request))
    assert json.loads(removed.stdout) == {"removed": ["iter_0000005"]}  # 10 is the tracker's
    assert sorted(os.listdir(tmp_path)) == ["iter_0000010", "latest_checkpointed_iteration.txt", "run", "set-aside"]
    assert json.loads(Path(ledger).read_text()) == {"saves": []}


# dataset_helpers: dataset_helpers.py


def _megatron_tree(root: Path, setup_py: str | None) -> Path:
    """A Megatron-LM-shaped tree whose setup.py 'builds' the helpers as setup.py build_ext --inplace would (a
    module in megatron/core/datasets), so that the build-when-missing logic runs without a compiler."""
    datasets = root / "megatron" / "core" / "datasets"
    datasets.mkdir(parents=True)
    for package in (root / "megatron", root / "megatron" / "core", datasets):
        (package / "__init__.py").write_text("")
    if setup_py is not None:
        (root / "setup.py").write_text(setup_py)
    return root


BUILDS_HELPERS = (
    "import pathlib, sys\n"
    "assert sys.argv[1:] == ['build_ext', '--inplace'], sys.argv\n"
    "pathlib.Path('megatron/core/datasets/helpers_cpp.py').write_text('BUILT = True\\n')\n"
)


def test_dataset_helpers_are_built_once_when_they_do_not_import_and_then_left_alone(tmp_path):
    tree = _megatron_tree(tmp_path / "Megatron-LM", BUILDS_HELPERS)
    check = json.loads(run("dataset_helpers.py", f"--megatron-home={tree}").stdout)
    assert check["tree"] and not check["importable"] and not check["built"], check
    assert "helpers_cpp" in check["error"], check
    assert not (tree / "megatron/core/datasets/helpers_cpp.py").exists(), "the check alone built them"
    first = json.loads(run("dataset_helpers.py", f"--megatron-home={tree}", "--mode=build").stdout)
    assert first["importable"] and first["built"] and first["module"].startswith(str(tree.resolve())), first
    second = json.loads(run("dataset_helpers.py", f"--megatron-home={tree}", "--mode=build").stdout)
    assert second["importable"] and not second["built"] and second["seconds"] == 0.0, second


def test_dataset_helpers_a_build_that_leaves_them_unimportable_is_reported_with_its_output(tmp_path):
    # setup.py's extension is optional=True in Megatron: a failed compile exits 0, so the import is what counts
    tree = _megatron_tree(tmp_path / "Megatron-LM", "print('error: command g++ failed: No such file')\n")
    done = run("dataset_helpers.py", f"--megatron-home={tree}", "--mode=build")
    found = json.loads(done.stdout)
    assert not found["importable"] and not found["built"], found
    assert "No module named 'megatron.core.datasets.helpers_cpp'" in found["error"], found
    assert "g++ failed" in found["error"] and "build_ext --inplace" in found["error"], found


def test_dataset_helpers_say_when_there_is_no_megatron_tree(tmp_path):
    found = json.loads(run("dataset_helpers.py", f"--megatron-home={tmp_path}/none").stdout)
    assert not found["tree"] and not found["importable"] and "no Megatron-LM tree" in found["error"], found
