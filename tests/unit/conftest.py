"""Fixtures shared by the unit tests."""

import os
import time

import pytest


@pytest.fixture
def india_clock():
    """The machine's clock set to India time (+05:30, a zone whose hours start on the half hour):
    what pdlift writes and asks for must still be UTC."""
    before = os.environ.get("TZ")
    os.environ["TZ"] = "Asia/Kolkata"
    time.tzset()
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("TZ", None)
        else:
            os.environ["TZ"] = before
        time.tzset()
