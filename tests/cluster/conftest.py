"""A real single-node SLURM cluster for the cluster tests: munged, slurmctld and slurmd on localhost, run as
root in a container (no systemd, no cgroups), everything under one temporary folder.

Debian's packages: ``apt-get install -y slurm-wlm munge`` (``.ci/run`` installs them). The daemons run in
the foreground as children of the test process, so stopping them is killing those children; their logs
stay in the temporary folder and their tails are printed when a test fails.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from conftest import require_component
from helpers import free_port

DAEMONS = ("munged", "slurmctld", "slurmd")
CLIENTS = ("sbatch", "squeue", "scancel", "scontrol", "sinfo")
PARTITION = "tests"
SACCT_STAND_IN = Path(__file__).with_name("sacct_stand_in.py")
INSTALL = "apt-get install -y slurm-wlm munge (.ci/run does this)"


def _binary(name: str) -> str | None:
    return shutil.which(name) or next((p for p in (f"/usr/sbin/{name}",) if os.access(p, os.X_OK)), None)


@dataclass
class SlurmCluster:
    """One node (this machine, as many CPUs as it has) in one partition; ``env`` points SLURM's clients at it."""

    root: Path
    node: str = field(default_factory=lambda: socket.gethostname().split(".")[0])
    processes: dict[str, subprocess.Popen] = field(default_factory=dict)

    @property
    def conf(self) -> Path:
        return self.root / "slurm.conf"

    @property
    def logs(self) -> Path:
        return self.root / "log"

    @property
    def env(self) -> dict[str, str]:
        """The environment of a SLURM client of this cluster: its config, and the ``sacct`` stand-in first on PATH."""
        return {**os.environ, "SLURM_CONF": str(self.conf), "PATH": f"{self.root / 'bin'}:{os.environ['PATH']}"}

    def write_config(self) -> None:
        """slurm.conf for a container: no cgroups (proctrack/linuxproc, task/none), no accounting database,
        state and spool under ``root``, fresh ports so that several test sessions on one machine never meet."""
        for folder in ("state", "spool", "log", "munge"):
            (self.root / folder).mkdir(parents=True, exist_ok=True)
        (self.root / "munge").chmod(0o700)
        key = self.root / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        memory_mb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2**20
        lines = {
            "ClusterName": "controversial-tests",
            "SlurmctldHost": f"{self.node}(127.0.0.1)",
            "SlurmUser": "root",
            "SlurmdUser": "root",
            "SlurmctldPort": str(free_port()),
            "SlurmdPort": str(free_port()),
            "AuthType": "auth/munge",
            "CredType": "cred/munge",
            # cred_expire: also how long a requeued job waits before it may start again (default 120 s)
            "AuthInfo": f"socket={self.root / 'munge' / 'munge.socket'},cred_expire=10",
            "SlurmctldLogFile": str(self.logs / "slurmctld.log"),
            "SlurmdLogFile": str(self.logs / "slurmd.log"),
            "StateSaveLocation": str(self.root / "state"),
            "SlurmdSpoolDir": str(self.root / "spool"),
            "SlurmctldPidFile": str(self.root / "slurmctld.pid"),
            "SlurmdPidFile": str(self.root / "slurmd.pid"),
            "ProctrackType": "proctrack/linuxproc",
            "TaskPlugin": "task/none",
            "JobAcctGatherType": "jobacct_gather/none",
            "AccountingStorageType": "accounting_storage/none",
            "JobCompType": "jobcomp/filetxt",
            "JobCompLoc": str(self.logs / "jobcomp.log"),
            "SelectType": "select/cons_tres",
            "SelectTypeParameters": "CR_CPU",
            "SchedulerType": "sched/builtin",
            "SchedulerParameters": "sched_interval=2",  # a requeued job starts as soon as it may (default 60 s)
            "MpiDefault": "none",
            "ReturnToService": "2",
            "SlurmdTimeout": "5",  # a lost node is marked down within seconds (default 300 s)
            "MessageTimeout": "3",
            "KillWait": "1",
            "MinJobAge": "600",
            "MailProg": "/bin/true",
            "PlugStackConfig": str(self.root / "plugstack.conf"),
        }
        (self.root / "plugstack.conf").write_text("")
        sacct = self.root / "bin" / "sacct"
        sacct.parent.mkdir(exist_ok=True)
        sacct.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{SACCT_STAND_IN}" "$@"\n')
        sacct.chmod(0o755)
        text = "".join(f"{k}={v}\n" for k, v in lines.items())
        text += f"NodeName={self.node} NodeAddr=127.0.0.1 CPUs={os.cpu_count()} RealMemory={memory_mb} State=UNKNOWN\n"
        text += f"PartitionName={PARTITION} Nodes=ALL Default=YES MaxTime=INFINITE State=UP\n"
        self.conf.write_text(text)

    def _spawn(self, name: str, *args: str) -> None:
        with (self.logs / f"{name}.stderr").open("ab") as out:  # the daemons' own log files have timestamps
            self.processes[name] = subprocess.Popen(
                [_binary(name), *args], env=self.env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )

    def start(self) -> None:
        munge = self.root / "munge"
        self._spawn(
            "munged",
            "--foreground",
            "--force",
            f"--key-file={munge / 'munge.key'}",
            f"--socket={munge / 'munge.socket'}",
            f"--pid-file={munge / 'munged.pid'}",
            f"--seed-file={munge / 'munged.seed'}",
        )
        self._wait(lambda: (munge / "munge.socket").exists(), "munged to open its socket")
        self._spawn("slurmctld", "-D", "-c", "-f", str(self.conf))
        self.start_slurmd()

    def start_slurmd(self) -> None:
        self._spawn("slurmd", "-D", "-f", str(self.conf), "-N", self.node)
        self._wait(lambda: self.node_state() == "idle", f"node {self.node} to be idle")

    def stop_node(self) -> None:
        """The node disappears as a crashed machine would: slurmd, the job steps it started (slurmstepd) and
        their processes are all frozen (SIGSTOP, so that none reports the others' end), then killed."""
        process = self.processes.pop("slurmd", None)
        victims = ([process.pid] if process is not None else []) + self._job_processes()
        for sig in (signal.SIGSTOP, signal.SIGKILL):
            for pid in victims:
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
        if process is not None:
            process.wait()

    def kill_tasks(self) -> None:
        """SIGKILL every process of the job steps (not slurmstepd): what SLURM does ``KillWait`` after a
        cancel's SIGTERM, which submitit's jobs ignore. In this container proctrack/linuxproc did not deliver
        it: a cancelled job's Python went on and finished its pair."""
        for pid in self._job_processes(steps=False):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def _job_processes(self, steps: bool = True) -> list[int]:
        """This cluster's slurmstepd processes (started by our slurmd, so with our SLURM_CONF; only with
        ``steps``) and all their descendants (the job scripts, srun and the jobs' Python), parents first."""
        parents, stepds = {}, set()
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                parents[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
                if (entry / "cmdline").read_bytes().startswith(b"slurmstepd") and self._ours(entry):
                    stepds.add(int(entry.name))
            except (OSError, ValueError, IndexError):
                continue
        victims, generation = [], sorted(stepds)
        while generation:
            victims += generation
            generation = sorted(pid for pid, parent in parents.items() if parent in generation)
        return victims if steps else [pid for pid in victims if pid not in stepds]

    def _ours(self, proc: Path) -> bool:
        return f"SLURM_CONF={self.conf}".encode() in (proc / "environ").read_bytes().split(b"\0")

    def stop(self) -> None:
        """The node first (so no job outlives the cluster), then slurmctld and munged."""
        self.stop_node()
        for name in reversed(DAEMONS):
            process = self.processes.pop(name, None)
            if process is None:
                continue
            process.terminate()
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

    def run(self, *command: str) -> str:
        return subprocess.run(command, env=self.env, check=True, capture_output=True, text=True, timeout=30).stdout

    def node_state(self) -> str:
        try:
            return self.run("sinfo", "--noheader", "--Node", "--format=%T").strip()
        except subprocess.SubprocessError:
            return ""

    def _wait(self, ready, what: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while not ready():
            for name, process in self.processes.items():
                if process.poll() is not None:
                    raise RuntimeError(f"{name} exited with {process.returncode}\n{self.log_tails()}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"waited {timeout:.0f} s for {what}\n{self.log_tails()}")
            time.sleep(0.2)

    def log_tails(self, lines: int = 30) -> str:
        tails = []
        for path in sorted(self.logs.glob("*")):
            text = path.read_text(errors="replace").splitlines()[-lines:]
            tails.append(f"--- {path} (last {len(text)} lines) ---\n" + "\n".join(text))
        return "\n".join(tails)


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory) -> Iterator[SlurmCluster]:
    """A running single-node cluster for the whole session; its logs are kept under the session's tmp folder."""
    missing = [name for name in DAEMONS + CLIENTS if _binary(name) is None]
    require_component(not missing, f"SLURM ({', '.join(missing)})", INSTALL)
    cluster = SlurmCluster(tmp_path_factory.mktemp("slurm"))
    cluster.write_config()
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    """A failed cluster test shows the last lines of every daemon's log (the folder stays for the rest)."""
    outcome = yield
    report = outcome.get_result()
    cluster = getattr(item, "funcargs", {}).get("slurm_cluster")
    if report.failed and cluster is not None:
        report.sections.append((f"SLURM logs ({cluster.logs})", cluster.log_tails()))
