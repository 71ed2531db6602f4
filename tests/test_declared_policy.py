"""A machine may name its halt policy; the policy is loaded with it and fails closed."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from fsm_agent import MachineSpecError, load_machine
from fsm_agent.cli.main import cli

EXAMPLE = Path(__file__).parent.parent / "examples" / "payments_retry"


@pytest.fixture
def copy(tmp_path: Path) -> Path:
    for name in ("payments.yaml", "halt-policy.yml"):
        shutil.copy(EXAMPLE / name, tmp_path / name)
    return tmp_path


def test_the_payments_example_declares_its_policy() -> None:
    spec = load_machine(str(EXAMPLE / "payments.yaml"))
    assert spec.policy == "halt-policy.yml"
    assert spec.policy_path() == EXAMPLE / "halt-policy.yml"


def test_a_declared_policy_missing_a_key_fails_the_machine_load(copy: Path) -> None:
    policy = copy / "halt-policy.yml"
    policy.write_text(policy.read_text().replace("  retry_budget: local_only\n", ""))
    with pytest.raises(MachineSpecError) as info:
        load_machine(str(copy / "payments.yaml"))
    assert info.value.key == "$.policy"
    assert info.value.source.startswith(f"{copy / 'payments.yaml'}:")
    assert "required key missing @ $.control_plane.retry_budget" in str(info.value)


def test_a_declared_policy_that_does_not_exist_fails_the_load(copy: Path) -> None:
    (copy / "halt-policy.yml").unlink()
    with pytest.raises(MachineSpecError, match="cannot read the policy file"):
        load_machine(str(copy / "payments.yaml"))
    result = CliRunner().invoke(cli, ["validate", str(copy / "payments.yaml")])
    assert result.exit_code == 2


def test_lint_uses_the_declared_policy(copy: Path) -> None:
    policy = copy / "halt-policy.yml"
    policy.write_text(policy.read_text().replace("local_halt", "nothing"))
    result = CliRunner().invoke(cli, ["lint", str(copy / "payments.yaml")])
    assert result.exit_code == 2  # the machine itself no longer loads: its policy fails closed
    assert "$.policy" in result.output
