"""The `tailor` command end to end: a real server process on the embedded defaults, driven
over HTTP the way a new user would with curl."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from service.config import REPO_ROOT
from tests.server_process import create_tenant, free_port, server_env, wait_ready


def _tailor(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TAILOR_")}
    return subprocess.run(
        [sys.executable, "-m", "service.cli", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("TAILOR_")}
    # A file, not a pipe: an unread pipe fills up with the server's logs and blocks it.
    log = (tmp_path / "server.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "service.cli", "serve", "--host", "127.0.0.1", "--port", str(port)],
        cwd=tmp_path,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    wait_ready(proc, base, tmp_path / "server.log", limit_s=90)
    try:
        yield base, tmp_path
    finally:
        proc.terminate()
        proc.wait(timeout=20)
        log.close()


def test_new_user_flow(server: tuple[str, Path]) -> None:
    base, cwd = server
    assert (cwd / ".tailor" / "tailor.db").exists()  # embedded SQLite, migrated by serve
    out = _tailor(cwd, "admin", "create-tenant", "acme")
    key = out.stdout.strip().splitlines()[-1]
    assert key.startswith("tlr_")
    h = {"Authorization": f"Bearer {key}"}

    r = httpx.post(f"{base}/v1/users/alice/attributes", json={"text": "Is vegetarian"}, headers=h)
    assert r.status_code == 201, r.text
    r = httpx.get(f"{base}/v1/users/alice/attributes", headers=h)
    assert [a["text"] for a in r.json()["items"]] == ["Is vegetarian"]

    key_id = key[4:20]
    _tailor(cwd, "admin", "revoke-key", key_id)
    assert httpx.get(f"{base}/v1/users/alice/attributes", headers=h).status_code == 401
    assert "tailor_http_request_duration_seconds" in httpx.get(f"{base}/metrics").text


def test_migrate_down_and_up(tmp_path: Path) -> None:
    _tailor(tmp_path, "migrate")
    _tailor(tmp_path, "migrate", "--downgrade", "base")
    _tailor(tmp_path, "migrate")
    out = _tailor(tmp_path, "admin", "create-tenant", "t")
    assert out.stdout.strip().splitlines()[-1].startswith("tlr_")


def test_revoke_unknown_key_fails(tmp_path: Path) -> None:
    with pytest.raises(subprocess.CalledProcessError) as err:
        _tailor(tmp_path, "admin", "revoke-key", "0" * 16)
    assert "no such key" in err.value.stderr


# --- start-up faults: one line naming the problem and the fix, no traceback -----------------


def _serve_fails(
    cwd: Path, prefix: list[str] | None = None, env: dict[str, str] | None = None
) -> str:
    """Runs `tailor serve` expected to fail at start-up; its one error line."""
    child_env = {k: v for k, v in os.environ.items() if not k.startswith("TAILOR_")}
    child_env |= {"TAILOR_LOAD_LLM": "false", **(env or {})}
    proc = subprocess.run(
        [*(prefix or []), sys.executable, "-m", "service.cli", "serve", "--port", str(free_port())],
        cwd=cwd,
        env=child_env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 1, (proc.returncode, proc.stderr[-3000:])
    assert "Traceback" not in proc.stderr and "Traceback" not in proc.stdout, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, proc.stderr
    assert proc.stderr.rstrip().endswith(errors[0]), proc.stderr  # the last word, alone
    return errors[0]


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        (
            {"TAILOR_JOBS_LEASE_S": "abc"},
            "error: invalid settings: TAILOR_JOBS_LEASE_S='abc': Input should be a valid number",
        ),
        (
            {"TAILOR_JOBS_LEASE_S": "5", "TAILOR_JOBS_HEARTBEAT_S": "5"},
            "error: invalid settings: TAILOR_JOBS_HEARTBEAT_S (5) must be shorter than "
            "TAILOR_JOBS_LEASE_S (5)",
        ),
        (
            {"TAILOR_ONNX_PROVIDER": "tpu"},
            "error: invalid settings: TAILOR_ONNX_PROVIDER='tpu': Input should be 'cpu' or 'cuda'",
        ),
    ],
)
def test_a_bad_setting_fails_with_one_line(
    tmp_path: Path, env: dict[str, str], expected: str
) -> None:
    line = _serve_fails(tmp_path, env=env)
    assert line.startswith(expected), line
    assert line.endswith(
        "fix or unset them in the environment (README.md, Configuration, lists every setting)"
    )
    assert not (tmp_path / ".tailor").exists()  # nothing was started or created


def test_an_unknown_variable_is_named_with_the_setting_it_resembles(tmp_path: Path) -> None:
    line = _serve_fails(
        tmp_path, env={"TAILOR_JOBS_LEASE_SECONDS": "15", "TAILOR_JOBS_LEASE_S": "abc"}
    )
    assert "TAILOR_JOBS_LEASE_S='abc'" in line
    result = subprocess.run(
        [sys.executable, "-m", "service.cli", "migrate"],
        cwd=tmp_path,
        env={k: v for k, v in os.environ.items() if not k.startswith("TAILOR_")}
        | {"TAILOR_JOBS_LEASE_SECONDS": "15"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0
    assert (
        "warning: TAILOR_JOBS_LEASE_SECONDS is not a setting and is ignored "
        "(did you mean TAILOR_JOBS_LEASE_S?)"
    ) in result.stderr


def _broken_models(tmp_path: Path) -> Path:
    models = tmp_path / "models"
    shutil.copytree(REPO_ROOT / "models" / "verifier", models / "verifier")
    return models


@pytest.mark.slow
def test_a_truncated_model_file_fails_with_one_line(tmp_path: Path) -> None:
    models = _broken_models(tmp_path)
    graph = models / "verifier" / "model.fp16.onnx"
    graph.write_bytes(graph.read_bytes()[:100_000])
    line = _serve_fails(tmp_path, env={"TAILOR_MODELS_DIR": str(models)})
    assert line.startswith(
        f"error: model 'verifier' cannot be loaded from {models / 'verifier'}: {graph} is "
        "truncated or corrupt (DecodeError"
    ), line
    assert line.endswith(
        "restore the folder from the release (or delete it to run without this model), or "
        "point TAILOR_MODELS_DIR at a complete copy"
    )


def test_a_missing_model_file_fails_with_one_line(tmp_path: Path) -> None:
    models = _broken_models(tmp_path)
    (models / "verifier" / "tokenizer.json").unlink()
    line = _serve_fails(tmp_path, env={"TAILOR_MODELS_DIR": str(models)})
    assert line.startswith(
        f"error: model 'verifier' cannot be loaded: {models / 'verifier' / 'tokenizer.json'} "
        "is missing; restore the folder"
    ), line


def _without_root_override() -> list[str] | None:
    """A prefix that makes file permissions apply to this test's child (root ignores them),
    or None when that is not possible here."""
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        return None
    prefix = [setpriv, "--bounding-set=-dac_override,-dac_read_search", "--"]
    probe = subprocess.run([*prefix, "true"], capture_output=True, timeout=30)
    return prefix if probe.returncode == 0 else None


def test_an_unwritable_database_directory_fails_with_one_line(tmp_path: Path) -> None:
    prefix = _without_root_override()
    if prefix is None:
        pytest.skip("running as root without setpriv: permissions cannot be enforced")
    read_only = tmp_path / "read-only"
    read_only.mkdir()
    read_only.chmod(0o555)
    try:
        line = _serve_fails(
            tmp_path,
            prefix,
            env={"TAILOR_DATA_DIR": str(read_only), "TAILOR_LOAD_MODELS": "false"},
        )
    finally:
        read_only.chmod(0o755)
    assert line == (
        f"error: the database at {read_only / 'tailor.db'} cannot be opened or created (unable "
        "to open database file); make the file and its directory writable by this user, or set "
        "TAILOR_DATA_DIR (or TAILOR_DATABASE_URL) to a writable place"
    )
    assert not (read_only / "tailor.db").exists()


def test_a_database_path_that_cannot_be_created_fails_with_one_line(tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("not a directory")
    data_dir = tmp_path / "a-file" / "data"
    line = _serve_fails(
        tmp_path, env={"TAILOR_DATA_DIR": str(data_dir), "TAILOR_LOAD_MODELS": "false"}
    )
    assert line == (
        f"error: the database directory {data_dir} cannot be created (Not a directory); create "
        "it or set TAILOR_DATA_DIR (or TAILOR_DATABASE_URL) to a writable place"
    )


@pytest.mark.slow
def test_empty_models_folder_serves_but_is_not_ready(tmp_path: Path) -> None:
    """Without the models the API needs, /readyz is 503 and names them (as /v1/select is)."""
    empty = tmp_path / "no-models"
    empty.mkdir()
    data_dir = tmp_path / "data"
    log = tmp_path / "server.log"
    env = server_env(data_dir, TAILOR_MODELS_DIR=str(empty), TAILOR_LOAD_LLM="false")
    port = free_port()
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "service.cli", "serve", "--port", str(port)],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        ready = None
        while time.monotonic() < deadline and ready is None:
            assert proc.poll() is None, log.read_text()
            try:
                ready = httpx.get(f"{base}/readyz", timeout=5)
            except httpx.HTTPError:
                time.sleep(0.3)
        assert ready is not None, log.read_text()
        assert ready.status_code == 503, ready.text
        assert ready.json()["checks"]["models"].startswith("not loaded: verifier, relevance")
        assert ready.json()["checks"]["database"] == "ok"
        key = create_tenant(data_dir)
        r = httpx.post(
            f"{base}/v1/select",
            json={"prompt": "dinner ideas?", "attributes": ["Is vegetarian"]},
            headers={"Authorization": f"Bearer {key}"},
            timeout=30,
        )
        assert r.status_code == 503, r.text
    finally:
        proc.terminate()
        proc.wait(timeout=30)
