"""The runner's stand-in for dbt_common's behavior-flag source names what dbt_common's own
``inspect.stack()`` walk names: the module that declared the flag."""

from __future__ import annotations

import inspect

from dbt_common.behavior_flags import BehaviorFlagRendered

from runner.dbt_invoke import _flag_source


def _stack_source() -> str:
    """dbt_common's walk, as it is written there (the first module not behavior_flags)."""
    for frame in inspect.stack():
        module = inspect.getmodule(frame[0])
        if module and module.__name__ != "dbt_common.behavior_flags":
            return module.__name__
    return "Unknown"


def test_the_flag_source_is_the_declaring_module_as_dbt_common_finds_it() -> None:
    flag = {"name": "some_flag", "default": False, "description": "a flag"}
    rendered = BehaviorFlagRendered(flag, {})  # built under the stand-in (tests/conftest.py)
    assert rendered._behavior_change_event.flag_source == __name__
    assert _flag_source() == _stack_source() == __name__
    assert BehaviorFlagRendered.__dict__["_default_source"].__func__ is _flag_source
