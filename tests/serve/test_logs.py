from __future__ import annotations

import json
import logging

from serve.ops.logs import JsonFormatter


def test_log_lines_are_json_with_task_and_step_ids() -> None:
    record = logging.LogRecord("serve.tasks.runner", logging.INFO, __file__, 1, "step %d", (3,), None)
    record.task_id = "abc"
    record.step = 3
    record.policy_s = 0.25
    line = json.loads(JsonFormatter().format(record))
    assert line["msg"] == "step 3"
    assert line["level"] == "info"
    assert line["task_id"] == "abc"
    assert line["step"] == 3
    assert line["policy_s"] == 0.25
    assert "args" not in line
    assert line["ts"].endswith("+00:00")


def test_exceptions_are_kept_in_one_line() -> None:
    try:
        raise ValueError("boom")
    except ValueError:
        import sys

        record = logging.LogRecord("x", logging.ERROR, __file__, 1, "failed", (), sys.exc_info())
    text = JsonFormatter().format(record)
    assert "\n" not in text
    assert "ValueError: boom" in json.loads(text)["exc"]
