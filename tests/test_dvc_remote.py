"""The team setup of the README against a real S3 API on loopback (issue #33, part 3).

moto's S3 server (``moto[server]``: the S3 HTTP API, not a mock of our code) runs on 127.0.0.1, a
bucket on it is the default DVC remote through ``dvc-s3``, and a bare git repository on disk is the
git remote.  Researcher A runs a small pipeline (tests/dvc_sandbox.py), commits, ``dvc push`` and
``git push``; collaborator B clones and ``dvc pull``s: every output byte-identical, ``dvc status``
clean, ``dvc repro`` runs nothing, ``dvc metrics diff`` against the pushed revision works; B's
experiment goes out with ``dvc exp push`` and a third clone sees it in ``dvc exp show`` after
``dvc exp pull``, outputs included.  The commands are those docs/running.md shows.
"""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

import dvc_sandbox as sandbox

pytestmark = pytest.mark.slow

BUCKET = "stereolens-team"
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1",
               "AWS_EC2_METADATA_DISABLED": "true"}


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="module")
def s3_endpoint(tmp_path_factory):
    """moto's S3 server on a free loopback port, with an empty bucket; stopped after the module."""
    missing = [name for name in ("moto", "dvc_s3", "boto3") if importlib.util.find_spec(name) is None]
    if missing:
        if os.environ.get("CI"):
            pytest.fail(f"{', '.join(missing)} not installed: the test extra installs moto[server] and dvc-s3")
        pytest.skip(f"{', '.join(missing)} not installed (pip install -e '.[test]' installs moto[server] and dvc-s3)")
    port = _free_port()
    log = tmp_path_factory.mktemp("moto") / "server.log"
    with open(log, "wb") as sink:
        server = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                                  stdout=sink, stderr=subprocess.STDOUT, env={**os.environ, **CREDENTIALS})
    endpoint = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(endpoint, timeout=2).close()
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"moto's S3 server did not start on {endpoint}:\n{log.read_text()}")
                time.sleep(0.2)
        import boto3

        boto3.client("s3", endpoint_url=endpoint, **{k.lower(): v for k, v in CREDENTIALS.items()
                                                    if k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")},
                     region_name="us-east-1").create_bucket(Bucket=BUCKET)
        yield endpoint
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_push_pull_and_experiments_through_an_s3_remote(s3_endpoint, tmp_path):
    origin = tmp_path / "origin.git"
    sandbox.run(tmp_path, "git", "init", "-q", "--bare", "-b", "main", str(origin))

    # researcher A: the team setup once, a run, push
    a = sandbox.make_repo(tmp_path / "a")
    sandbox.run(a, "git", "remote", "add", "origin", str(origin))
    sandbox.run(a, "dvc", "remote", "add", "-d", "storage", f"s3://{BUCKET}/dvc")
    sandbox.run(a, "dvc", "remote", "modify", "storage", "endpointurl", s3_endpoint)
    sandbox.run(a, "dvc", "repro", "-q", machine=1, extra_env=CREDENTIALS)
    sandbox.run(a, "git", "add", "dvc.lock", ".dvc/config")
    sandbox.run(a, "git", "commit", "-q", "-m", "the team remote and the committed run")
    sandbox.run(a, "dvc", "push", machine=1, extra_env=CREDENTIALS)
    sandbox.run(a, "git", "push", "-q", "origin", "main")
    pushed_rev = sandbox.run(a, "git", "rev-parse", "HEAD").stdout.strip()
    committed = sandbox.outputs(a)

    # collaborator B on another machine: clone, pull, nothing to recompute
    b = tmp_path / "b"
    sandbox.run(tmp_path, "git", "clone", "-q", str(origin), str(b))
    sandbox.run(b, "dvc", "pull", machine=2, extra_env=CREDENTIALS)
    pulled = sandbox.outputs(b)
    assert sorted(pulled) == sorted(committed) and len(pulled) == 4
    assert all(pulled[path] == content for path, content in committed.items())
    assert "Data and pipelines are up to date" in sandbox.run(b, "dvc", "status", machine=2).stdout
    repro = sandbox.run(b, "dvc", "repro", machine=2, extra_env=CREDENTIALS)
    assert "Running stage" not in repro.stdout and sandbox.outputs(b) == committed, repro.stdout

    # B tries a variant and compares it with the pushed revision's metrics
    sandbox.run(b, "dvc", "exp", "run", "-S", "toy.limit=6", "-n", "wider", machine=2, extra_env=CREDENTIALS)
    diff = json.loads(sandbox.run(b, "dvc", "metrics", "diff", pushed_rev, "--json", machine=2).stdout)
    n = diff["reports/toy/summary.json"]["tiny-a.n"]
    assert (n["old"], n["new"]) == (4, 6)
    tried = sandbox.outputs(b)
    sandbox.run(b, "dvc", "exp", "push", "origin", "wider", machine=2, extra_env=CREDENTIALS)

    # a third clone sees B's experiment and gets its outputs from the remote
    c = tmp_path / "c"
    sandbox.run(tmp_path, "git", "clone", "-q", str(origin), str(c))
    sandbox.run(c, "dvc", "exp", "pull", "origin", "wider", machine=3, extra_env=CREDENTIALS)
    shown = sandbox.run(c, "dvc", "exp", "show", "--json", machine=3).stdout
    experiments = [exp for rev in json.loads(shown) for exp in (rev.get("experiments") or [])]
    names = [run.get("name") for exp in experiments for run in (exp.get("revs") or [])]
    assert "wider" in names, shown
    sandbox.run(c, "dvc", "exp", "apply", "wider", machine=3, extra_env=CREDENTIALS)
    assert sandbox.outputs(c) == tried
