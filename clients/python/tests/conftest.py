"""Fixtures: connections to the sidecars under test, named by environment variables.

CONTEXT_ASSEMBLER_ADDR is a sidecar with a memory store (a SQLite file will do),
CONTEXT_ASSEMBLER_ADDR_NO_MEMORY one without, CONTEXT_ASSEMBLER_UNIX_ADDR one listening on a Unix
socket ("unix:/path"). A test needing one that is not set is skipped, unless
CONTEXT_ASSEMBLER_REQUIRE_SERVERS is set (as check.sh sets it in CI): then it fails.
"""

import os
import time

import pytest

from context_assembler import Connection, connect, wait_ready

ADDR_ENV = "CONTEXT_ASSEMBLER_ADDR"
ADDR_NO_MEMORY_ENV = "CONTEXT_ASSEMBLER_ADDR_NO_MEMORY"
UNIX_ADDR_ENV = "CONTEXT_ASSEMBLER_UNIX_ADDR"
REQUIRE_ENV = "CONTEXT_ASSEMBLER_REQUIRE_SERVERS"
# The sidecar is NOT_SERVING until its tokenizers are loaded.
READY_TIMEOUT_SECS = 60


def _connect(env: str):
    target = os.environ.get(env, "")
    if not target:
        if os.environ.get(REQUIRE_ENV):
            pytest.fail(f"{env} is not set, and {REQUIRE_ENV} requires a sidecar")
        pytest.skip(f"{env} is not set: no sidecar to test against")
    connection = connect(target)
    wait_ready(connection.channel, READY_TIMEOUT_SECS)
    return connection


@pytest.fixture(scope="session")
def connection():
    """The sidecar with a memory store."""
    with _connect(ADDR_ENV) as opened:
        yield opened


@pytest.fixture(scope="session")
def stub(connection: Connection):
    """An AssemblerStub of the sidecar with a memory store."""
    return connection.stub


@pytest.fixture(scope="session")
def stub_no_memory():
    """An AssemblerStub of the sidecar without a memory store."""
    with _connect(ADDR_NO_MEMORY_ENV) as opened:
        yield opened.stub


@pytest.fixture
def subject(request: pytest.FixtureRequest) -> str:
    """A memory subject no other test and no earlier run used (the store outlives a run)."""
    return f"clients/python/{request.node.name}/{time.time_ns():x}"


@pytest.fixture(scope="session")
def stub_unix():
    """An AssemblerStub of the sidecar listening on a Unix socket, through connect's defaults."""
    with _connect(UNIX_ADDR_ENV) as opened:
        yield opened.stub
