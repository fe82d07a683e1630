"""The leak guard itself: a test that leaves an asyncio task running must fail."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

LEAKY = '''
import asyncio

async def test_leaks_a_task():
    asyncio.create_task(asyncio.sleep(3600), name="forgotten")

async def test_cleans_up():
    task = asyncio.create_task(asyncio.sleep(3600))
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        pass
'''


def test_leaked_task_fails_the_test(pytester: pytest.Pytester) -> None:
    root = Path(__file__).parent
    pytester.makeconftest((root / "conftest.py").read_text())
    pytester.makepyfile(test_leaky=LEAKY)
    pytester.makeini("[pytest]\nasyncio_mode = auto\nasyncio_default_fixture_loop_scope = function\n")
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=2, errors=1)
    result.stdout.fnmatch_lines(["*leaked 1 asyncio task(s)*forgotten*"])
