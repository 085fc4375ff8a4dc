"""The test servers of scripts/start_postgres.sh and scripts/start_redis.sh (their URLs in PE_TEST_POSTGRES /
PE_TEST_REDIS, as .ci/run sets them): each wants the generated password its URL holds, so another local user
cannot connect, and the Redis script replaces an older server that has none."""

import contextlib
import os
import socket
import subprocess
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from pe_sweeps.storages.storage_url import url_password

ROOT = Path(__file__).resolve().parents[2]


def server_url(variable: str, script: str) -> str:
    """The URL in `variable`; fails in CI without it, skips elsewhere."""
    url = os.environ.get(variable)
    if not url and os.environ.get("CI"):
        pytest.fail(f"CI must provide {variable} (scripts/{script})")
    if not url:
        pytest.skip(f"no {variable}: run scripts/{script} and set {variable}")
    return url


def without_password(url: str) -> str:
    parts = urlsplit(url)
    user = parts.netloc.rsplit("@", 1)[0].split(":", 1)[0]
    host = parts.netloc.rsplit("@", 1)[1]
    return parts._replace(netloc=f"{user}@{host}" if user else host).geturl()


def test_postgres_refuses_a_client_without_the_password(monkeypatch):
    import psycopg

    url = server_url("PE_TEST_POSTGRES", "start_postgres.sh")
    assert len(url_password(url)) >= 16
    monkeypatch.delenv("PGPASSWORD", raising=False)
    monkeypatch.setenv("PGPASSFILE", os.devnull)
    with pytest.raises(psycopg.OperationalError, match="password"):
        psycopg.connect(without_password(url), connect_timeout=10)
    with psycopg.connect(url, connect_timeout=10) as connection:
        assert connection.execute("select 1").fetchone() == (1,)


def test_redis_refuses_a_client_without_the_password():
    import redis

    url = server_url("PE_TEST_REDIS", "start_redis.sh")
    assert len(url_password(url)) >= 16
    with pytest.raises(redis.AuthenticationError):
        redis.Redis.from_url(without_password(url), socket_timeout=10).ping()
    assert redis.Redis.from_url(url, socket_timeout=10).ping()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.mark.slow
def test_the_redis_script_restarts_a_server_without_a_password(tmp_path):
    """An older instance on the port (no password) is shut down and started again with the kept password, which
    a second run reuses."""
    import redis

    server_url("PE_TEST_REDIS", "start_redis.sh")  # the script has run here: redis-server is installed
    port = free_port()
    subprocess.run(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--daemonize", "yes",
                    "--logfile", str(tmp_path / "old.log")], check=True)  # fmt: skip
    env = {**os.environ, "PE_REDIS_PORT": str(port), "PE_REDIS_PASSWORD_FILE": str(tmp_path / "password")}
    script = ["bash", str(ROOT / "scripts" / "start_redis.sh")]
    try:
        url = subprocess.run(script, env=env, check=True, capture_output=True, text=True).stdout.strip()
        assert url == f"redis://:{(tmp_path / 'password').read_text()}@127.0.0.1:{port}"
        assert oct((tmp_path / "password").stat().st_mode & 0o777) == "0o600"
        with pytest.raises(redis.AuthenticationError):
            redis.Redis(port=port, socket_timeout=10).ping()
        assert subprocess.run(script, env=env, check=True, capture_output=True, text=True).stdout.strip() == url
    finally:
        kept = (tmp_path / "password").read_text() if (tmp_path / "password").exists() else None
        for password in (kept, None):  # the restarted server, else the old one
            with contextlib.suppress(redis.RedisError):
                redis.Redis(port=port, password=password, socket_timeout=10).shutdown(nosave=True)
