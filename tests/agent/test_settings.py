"""The settings tree: every variable it reads, typos caught, the reference table."""

from __future__ import annotations

from agent.settings import AgentSettings, describe, markdown_table, unknown_variables, variable_names


def test_variables_are_the_leaves_and_groups_of_the_tree() -> None:
    names = variable_names(AgentSettings)
    assert {
        "UIS1_POLICY__BASE_URL",
        "UIS1_EPISODE__SAMPLING__TEMPERATURE",
        "UIS1_EPISODE__SAMPLING",
        "UIS1_STORE",
        "UIS1_ADB_SERVER",
    } <= names
    leaves = [doc.env for doc in describe(AgentSettings)]
    assert len(leaves) == len(set(leaves))
    assert "UIS1_EPISODE__SAMPLING" not in leaves


def test_a_misspelt_variable_is_reported_with_the_name_it_likely_meant() -> None:
    environ = {
        "UIS1_POLICY_BASE_URL": "http://vllm:8000",
        "UIS1_POLICY__BASE_URL": "http://vllm:8000",
        "UIS1_EPISODE__MAXSTEPS": "5",
        "UIS1_BANANA": "1",
        "UIS1_TEST_POSTGRES_URL": "x",
        "PATH": "/bin",
    }
    assert unknown_variables(AgentSettings, environ) == {
        "UIS1_POLICY_BASE_URL": "UIS1_POLICY__BASE_URL",
        "UIS1_EPISODE__MAXSTEPS": "UIS1_EPISODE__MAX_STEPS",
        "UIS1_BANANA": None,
    }


def test_the_reference_has_a_row_per_setting_with_its_default_and_meaning() -> None:
    table = markdown_table(AgentSettings)
    rows = table.splitlines()[2:]
    assert len(rows) == len(describe(AgentSettings))
    assert "| `UIS1_EPISODE__MAX_STEPS` | int | `30` | Step budget of an episode |" in rows
    assert all(row.count(" | ") == 3 and not row.endswith("|  |") for row in rows), (
        "a setting lacks a meaning"
    )
    assert "(computed)" in next(r for r in rows if "UIS1_STORE__URL" in r)  # machine-dependent: not printed
