"""The MLflow UI for the project's store, on loopback, opened on the experiment's runs table.

``mlflow server`` (what ``mlflow ui`` runs) with job execution off: the project logs no GenAI
jobs, and the job runner's worker processes would only take memory and cores.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator

from stereolens.errors import ConfigError


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def check_port(port: int, host: str = "127.0.0.1", option: str = "--port") -> None:
    """Refuse, in one line, a port that is no TCP port or that something on ``host`` already listens on."""
    import errno

    if not 1 <= port <= 65535:
        raise ConfigError(f"{option} must be an integer in [1, 65535], got {port}")
    with socket.socket() as sock:
        # as the server will bind: a port some closed connection still waits on (TIME_WAIT) is free to it
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            why = "already in use" if exc.errno == errno.EADDRINUSE else (exc.strerror or str(exc))
            raise ConfigError(f"{option} {port}: {why} on {host} (choose another {option})") from None


def server_command(tracking_uri: str, host: str, port: int, artifacts_destination: str | None = None) -> list[str]:
    """``mlflow server`` on ``tracking_uri``; with ``artifacts_destination``, as a team's server: it keeps the
    artifacts there and clients upload and download them through it (``--serve-artifacts``)."""
    served = ["--serve-artifacts", "--artifacts-destination", artifacts_destination] if artifacts_destination else []
    return [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", tracking_uri, *served,
            "--host", host, "--port", str(port), "--workers", "1"]


@contextlib.contextmanager
def mlflow_server(tracking_uri: str, *, host: str = "127.0.0.1", port: int | None = None,
                  timeout_s: float = 120.0, artifacts_destination: str | None = None) -> Iterator[str]:
    """Run an MLflow server on ``tracking_uri`` until the block ends; yields its base URL once it answers."""
    port = port or free_port(host)
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    process = subprocess.Popen(server_command(tracking_uri, host, port, artifacts_destination), env=env,
                               stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True, start_new_session=True)
    url = f"http://{host}:{port}"
    try:
        deadline = time.time() + timeout_s
        while True:
            if process.poll() is not None:
                # its traceback's last line says why; one line, as every refusal
                last = ((process.stderr.read() or "").strip().splitlines() or ["no message"])[-1]
                raise ConfigError(f"mlflow server on {tracking_uri} exited with status {process.returncode}: {last}")
            try:
                with urllib.request.urlopen(f"{url}/health", timeout=2) as answer:
                    if answer.status == 200:
                        break
            except OSError:
                pass
            if time.time() > deadline:
                raise ConfigError(f"mlflow server on {tracking_uri} did not answer at {url} within {timeout_s:.0f} s")
            time.sleep(0.5)
        yield url
    finally:
        # the server's uvicorn worker is its child: end the whole session the server was started in
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, 15)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, 9)
            process.wait(timeout=10)
