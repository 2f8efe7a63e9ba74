"""What the Prefect API says of a flow run: whether it has ended. The only code that asks."""

from __future__ import annotations

import uuid

from prefect import get_client
from prefect.settings import get_current_settings


def flow_run_ended(flow_run_id: str, temporary_server: bool = True) -> bool | None:
    """True when Prefect says the flow run has ended, False while it runs, None when it cannot say
    (no id; unknown to this server; the server away). ``temporary_server`` False: ask only a
    configured Prefect API (outside a flow run a temporary server would know nothing of it)."""
    if not flow_run_id or (not temporary_server and not get_current_settings().api.url):
        return None
    try:
        with get_client(sync_client=True) as client:
            state = client.read_flow_run(uuid.UUID(flow_run_id)).state
    except Exception:
        return None
    return bool(state and state.is_final())
