"""Harbor environment plugin that needs no Docker: each trial's commands run as local
processes in their own mount + PID namespace, chrooted into a per-trial scratch root.

Select it in a JobConfig with

    environment:
      import_path: "local_env:LocalEnvironment"

and put this file's directory on PYTHONPATH. Needs Linux, util-linux (unshare, nsenter,
chroot, mount) and root; as another user it tries an unprivileged user namespace.

Inside the sandbox, the host's /usr, /etc and /opt are mounted read-only, /dev is the
host's and /proc is the sandbox's own. Every other path (/app, /logs, /tests, /tmp,
/root, ...) is a plain directory under <scratch>/root on the host, so uploads and
downloads are plain file copies. One process, PID 1 of the sandbox, holds the
namespaces; killing it ends every process the trial started (tmux server included).
"""

import asyncio
import contextlib
import os
import shlex
import shutil
import signal
import tempfile
from pathlib import Path

from harbor.environments.base import BaseEnvironment, ExecResult

READ_ONLY = ("usr", "etc", "opt", "bin", "sbin", "lib", "lib32", "lib64", "libx32")
WRITABLE = ("app", "logs", "tests", "solution", "tmp", "var/tmp", "root", "home", "run")
BASE_ENV = {
    "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "HOME": "/root",
    "LANG": "C.UTF-8",
}

# Runs as PID 1 of the new namespaces: build the root, chroot, say "ready", then hold.
# ("ready" must come after the chroot: nsenter -r takes PID 1's root as it is then.)
HOLDER = r"""
set -e
R=$1; WORKDIR=$2; shift 2
for d in "$@"; do
  mkdir -p "$R/$d"; mount --rbind "/$d" "$R/$d"; mount -o remount,bind,ro "$R/$d"
done
mkdir -p "$R/dev" "$R/proc"
mount --rbind /dev "$R/dev"
mount -t proc proc "$R/proc"
exec chroot "$R" /bin/sh -c 'cd "$1" && echo ready && exec sleep infinity' sh "$WORKDIR"
"""


class LocalEnvironment(BaseEnvironment):
    @staticmethod
    def type() -> str:
        return "local-namespace"

    def _validate_definition(self):
        pass  # the task's environment/ (Dockerfile) is not used

    @property
    def _workdir(self) -> str:
        return self.task_env_config.workdir or "/app"

    def _host_path(self, sandbox_path: str | Path) -> Path:
        """Where a sandbox path lives on the host (writable paths only)."""
        return self._root / str(sandbox_path).lstrip("/")

    async def start(self, force_build: bool) -> None:
        self._scratch = Path(tempfile.mkdtemp(prefix=f"harbor-{self.session_id}-")).resolve()
        self._root = self._scratch / "root"
        bind = []
        for name in READ_ONLY:  # copy top-level symlinks (merged /usr), bind real dirs
            host = Path("/", name)
            if host.is_symlink():
                (self._root / name).parent.mkdir(parents=True, exist_ok=True)
                (self._root / name).symlink_to(os.readlink(host))
            elif host.is_dir():
                bind.append(name)
        for name in (*WRITABLE, self._workdir.lstrip("/")):
            self._host_path(name).mkdir(parents=True, exist_ok=True)
        (self._root / "tmp").chmod(0o1777)

        self._userns = os.geteuid() != 0
        userns = ["--user", "--map-root-user"] if self._userns else []
        self._holder = await asyncio.create_subprocess_exec(
            "unshare",
            *userns,
            "--mount",
            "--pid",
            "--fork",
            "--kill-child",
            "--propagation",
            "private",
            "--",
            "/bin/sh",
            "-c",
            HOLDER,
            "sh",
            str(self._root),
            self._workdir,
            *bind,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        line = await asyncio.wait_for(self._holder.stdout.readline(), 30)
        if line.strip() != b"ready":
            err = await self._holder.stderr.read()
            raise RuntimeError(f"sandbox setup failed: {err.decode(errors='replace')}")
        # unshare --fork's child is PID 1 of the sandbox; nsenter targets it.
        children = Path(f"/proc/{self._holder.pid}/task/{self._holder.pid}/children")
        self._pid = int(children.read_text().split()[0])
        if os.readlink(f"/proc/{self._pid}/root") != str(self._root):  # never touch the host
            raise RuntimeError(f"sandbox PID 1 is not chrooted into {self._root}")
        self.logger.debug(f"sandbox pid {self._pid}, root {self._root}")
        # harbor expects /logs/{agent,verifier,artifacts} to exist (Docker mounts them)
        await self.ensure_dirs(self._mount_targets(writable_only=True))

    async def stop(self, delete: bool):
        if getattr(self, "_holder", None) is not None:
            with contextlib.suppress(ProcessLookupError):  # PID 1 dies -> the sandbox dies
                os.kill(getattr(self, "_pid", None) or self._holder.pid, signal.SIGKILL)
            await self._holder.wait()
            self._holder = None
        if delete and getattr(self, "_scratch", None) is not None:
            shutil.rmtree(self._scratch, ignore_errors=True)

    async def exec(
        self,
        command: str,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        timeout_sec: int | None = None,
        user: str | int | None = None,
    ) -> ExecResult:
        user = self._resolve_user(user)
        if user not in (None, "root", 0, "0"):
            self.logger.debug(f"running as root, not as {user!r}")
        if cwd:
            command = f"cd {shlex.quote(cwd)} || exit 1\n{command}"
        enter = ["nsenter", "-t", str(self._pid), "-m", "-p", "-r", "-w"]
        if self._userns:
            enter += ["-U", "--preserve-credentials"]
        proc = await asyncio.create_subprocess_exec(
            *enter,
            "--",
            "/bin/bash",
            "-c",
            command,
            env={**BASE_ENV, **(self._merge_env(env) or {})},
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,
        )
        try:
            stdout, stderr = await asyncio.wait_for(proc.communicate(), timeout_sec)
        except TimeoutError:
            os.killpg(proc.pid, signal.SIGKILL)
            await proc.wait()
            raise RuntimeError(f"Command timed out after {timeout_sec} seconds") from None
        return ExecResult(
            stdout=stdout.decode(errors="replace") or None,
            stderr=stderr.decode(errors="replace") or None,
            return_code=proc.returncode,
        )

    async def upload_file(self, source_path: Path | str, target_path: str):
        target = self._host_path(target_path)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source_path, target)

    async def upload_dir(self, source_dir: Path | str, target_dir: str):
        shutil.copytree(source_dir, self._host_path(target_dir), dirs_exist_ok=True)

    async def download_file(self, source_path: str, target_path: Path | str):
        Path(target_path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(self._host_path(source_path), target_path)

    async def download_dir(self, source_dir: str, target_dir: Path | str):
        # symlinks=True: a link the agent made is copied as a link, never followed
        shutil.copytree(self._host_path(source_dir), target_dir, symlinks=True, dirs_exist_ok=True)
