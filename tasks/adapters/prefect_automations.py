"""pdlift's notifications installed as Prefect automations on a Prefect server (idempotent).

``ensure_automations(api_url, webhook_url)`` saves one notification block and, for each
automation in ``deploy/automations.yaml``, creates it or updates it in place (found by name;
extra copies of one name, say from ``prefect automation create --from-file`` run twice, are
deleted), so running it again leaves one of each. The Prefect server then evaluates each event
pdlift emits (``tasks.planning.notifications``) against the triggers and sends the
notification itself: nothing in pdlift posts to the webhook.

The block is Prefect's ``CustomWebhookNotificationBlock`` ("Custom Webhook"): the
``send-notification`` action accepts only a block with the ``notify`` capability
(``prefect/server/events/actions.py``, ``SendNotification._get_notification_block``), which
``prefect.blocks.webhook.Webhook`` lacks (that one is for the ``call-webhook`` action). The
webhook URL goes into the block's ``secrets`` and its ``url`` is the placeholder
``{{webhook_url}}``: the server reads the block with its secrets when it sends, while the UI
and the API show it obfuscated.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tasks.errors import ConfigError
from tasks.planning import notifications

SPEC_PATH = Path(__file__).resolve().parents[2] / "deploy" / "automations.yaml"
URL_SECRET = "webhook_url"


@dataclass(frozen=True)
class Installed:
    """What ``ensure_automations`` left on the server (no webhook URL: it may hold a token)."""

    api_url: str
    block_name: str
    block_id: str
    automations: dict[str, str] = field(default_factory=dict)  # name -> id
    created: tuple[str, ...] = ()
    updated: tuple[str, ...] = ()
    removed_duplicates: tuple[str, ...] = ()  # ids of extra automations of one name, deleted

    def lines(self) -> list[str]:
        out = [f"notification block {self.block_name!r} ({self.block_id}) on {self.api_url}"]
        out += [f"automation {name!r} ({aid}): {'created' if name in self.created else 'updated'}"
                for name, aid in self.automations.items()]
        out += [f"deleted a duplicate automation {aid}" for aid in self.removed_duplicates]
        return out


def load_spec(path: str | Path | None = None) -> dict[str, Any]:
    """The automations file (``deploy/automations.yaml`` by default), safe-loaded."""
    source = Path(path) if path else SPEC_PATH
    try:
        doc = yaml.safe_load(source.read_text())
    except OSError as e:
        raise ConfigError(f"{source}: cannot be read ({e.strerror or e})") from e
    except yaml.YAMLError as e:
        raise ConfigError(f"{source}: not valid YAML: {e}") from e
    if not isinstance(doc, dict):
        raise ConfigError(f"{source}: expected a mapping with `block` and `automations`")
    return doc


def ensure_automations(api_url: str, webhook_url: str, ui_url: str | None = None,
                       spec_path: str | Path | None = None) -> Installed:
    """Create or update, by name, the notification block and the automations of ``spec_path``
    on the Prefect server at ``api_url``; their notifications go to ``webhook_url`` and link to
    the UI at ``ui_url`` (default: beside the API). Idempotent."""
    from prefect.settings import PREFECT_API_URL, temporary_settings

    webhook_url = notifications.check_webhook_url(webhook_url)
    doc = load_spec(spec_path)
    block_fields = notifications.block_spec(doc)
    with temporary_settings({PREFECT_API_URL: api_url}):
        block_id = _save_block(block_fields, webhook_url)
        specs = notifications.automation_specs(doc, block_id, ui_url or notifications.ui_url_of(api_url))
        return _upsert(api_url, block_fields["name"], block_id, specs)


def _save_block(fields: dict[str, Any], webhook_url: str) -> str:
    from prefect.blocks.notifications import CustomWebhookNotificationBlock

    name = fields["name"]
    block = CustomWebhookNotificationBlock(
        name=name, url="{{" + URL_SECRET + "}}", method="POST", json_data=fields.get("json_data"),
        headers=fields.get("headers"), timeout=float(fields.get("timeout", 10)), secrets={URL_SECRET: webhook_url})
    return str(block.save(name, overwrite=True))


def _upsert(api_url: str, block_name: str, block_id: str, specs: list[dict[str, Any]]) -> Installed:
    from prefect.client.orchestration import get_client
    from prefect.events.schemas.automations import AutomationCore
    from pydantic import ValidationError

    cores = []
    for spec in specs:
        try:
            cores.append(AutomationCore.model_validate(spec))
        except ValidationError as e:
            raise ConfigError(f"automation {spec['name']!r} is not a valid Prefect automation: {e}") from e
    ids: dict[str, str] = {}
    created, updated, removed = [], [], []
    with get_client(sync_client=True) as client:
        for core in cores:
            existing = client.read_automations_by_name(core.name)  # the last updated first
            if existing:
                keep, *extra = existing
                client.update_automation(keep.id, core)
                ids[core.name] = str(keep.id)
                updated.append(core.name)
                for dup in extra:
                    client.delete_automation(dup.id)
                    removed.append(str(dup.id))
            else:
                ids[core.name] = str(client.create_automation(core))
                created.append(core.name)
    return Installed(api_url, block_name, block_id, ids, tuple(created), tuple(updated), tuple(removed))
