"""Fixtures of the authenticator's unit tests: a settable clock and a key store that can be taken down."""

from __future__ import annotations

import pytest

from tests.unit.tenancy.test_tenancy_auth import Clock, CountingStore


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def store() -> CountingStore:
    return CountingStore()
