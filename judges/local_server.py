"""The local judge server's lifecycle: `python -m judges.server --port 0 ...` as a child process,
its bound address read from the one line it prints at start-up, stopped at exit.

The LLM judge starts one for `local_server: {...}`; tests and benchmarks start them directly
(`wait=False` starts several at once, then `wait_ready()` each). The child gets
`--exit-with-parent`, so a killed run never leaves a server behind.
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from judges.config import LocalServerConfig, validate_config

__all__ = ["LocalJudgeServer", "stop_process"]

_REPO_ROOT = Path(__file__).resolve().parents[1]


class LocalJudgeServer:
    """A judge server subprocess on a free loopback port. `spec`: a LocalServerConfig or its dict;
    `stderr`: where the child's stderr goes (default: this process's)."""

    def __init__(
        self, spec: LocalServerConfig | dict[str, Any] | None = None, wait: bool = True, stderr: Any = None
    ) -> None:
        self.config: LocalServerConfig = validate_config(LocalServerConfig, spec, "local_server")
        cmd = [
            sys.executable,
            "-m",
            "judges.server",
            "--port",
            "0",
            "--host",
            "127.0.0.1",
            *self.config.cli_args(),
            "--exit-with-parent",
        ]
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([str(_REPO_ROOT), *filter(None, [env.get("PYTHONPATH")])])
        self.proc = subprocess.Popen(
            cmd,
            stdout=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            stderr=stderr,
            env=env,
            text=True,
            cwd=str(_REPO_ROOT),
        )
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._deadline = time.monotonic() + self.config.startup_timeout_s
        self.api_base: str | None = None
        # Keep reading its stdout, so the child never blocks on a full pipe.
        threading.Thread(target=self._drain, name="judge-server-stdout", daemon=True).start()
        if wait:
            self.wait_ready()

    @property
    def spec(self) -> dict[str, Any]:
        return self.config.model_dump()

    def _drain(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._lines.put(line)
        self._lines.put(None)

    def wait_ready(self) -> str:
        """Block until the server printed its address; returns api_base ("http://127.0.0.1:PORT/v1")."""
        while self.api_base is None:
            try:
                line = self._lines.get(timeout=max(0.01, self._deadline - time.monotonic()))
            except queue.Empty:
                self.stop()
                raise RuntimeError("local judge server did not start in time") from None
            if line is None:
                self.stop()
                raise RuntimeError(f"local judge server exited at startup (code {self.proc.poll()}); see its stderr")
            if "listening on " in line:
                self.api_base = line.split("listening on ", 1)[1].split()[0]
        return self.api_base

    @property
    def base_url(self) -> str:
        return self.wait_ready().removesuffix("/v1")

    def stats(self) -> dict[str, Any]:
        """The server's GET /stats (request counts)."""
        import urllib.request

        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback: never a proxy
        with opener.open(self.base_url + "/stats", timeout=10) as resp:
            return json.loads(resp.read())

    def stop(self) -> None:
        stop_process(self.proc)

    def __enter__(self) -> LocalJudgeServer:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def stop_process(proc: subprocess.Popen) -> None:
    """SIGTERM, then SIGKILL after 5 s; idempotent."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)
