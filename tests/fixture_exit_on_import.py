"""A tools (or model) module that raises as it is imported: `sys.exit(0)`, or what
FSM_AGENT_TEST_RAISE says (see `tests.fixture_exits`)."""

from tests.fixture_exits import _raise

_raise()
