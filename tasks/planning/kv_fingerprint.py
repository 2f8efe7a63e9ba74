"""The KV fingerprint of a rendered stack: what must match between a prefill and a decode engine
for one to load the other's KV cache. Pure.

A rolling update replaces one role at a time, so for a while an old decode loads the KV of a new
prefill (or the reverse). That is only safe when nothing the KV layout or the transfer handshake
depends on changes: vLLM's NIXL handshake refuses a peer whose vLLM version or KV-relevant config
hash differs (vllm/distributed/kv_transfer/kv_connector/v1/nixl_connector.py,
``NixlAgentMetadata`` / "compatibility check"), and both NIXL and Mooncake copy raw blocks, so
block (page) size, KV dtype, the attention backend's layout, speculative decoding's extra KV and
the model's weights must agree (``../shared/reference/fleet-updates.md``). Everything is read
back from the rendered manifests (``manifests.views``), as the engines would be told it, so a
change made through ``engine.extra_args`` counts like one made through a blueprint field.
"""

from __future__ import annotations

import json

from tasks.planning.manifests import views
from tasks.planning.manifests.common import MODEL_REVISION_ANNOTATION

VERSION_LABEL = "app.kubernetes.io/version"
# Connector settings that differ by role and by design (not part of the KV's shape).
_ROLE_KEYS = {"kv_role"}
_SGLANG_ROLE_FLAGS = {"--disaggregation-mode"}
# The transport is chosen by environment for some engine x connector pairs (SGLang's Mooncake and
# NIXL backends, libfabric's provider): a change there is a change of the wire.
TRANSPORT_ENV = ("FI_PROVIDER", "MOONCAKE_PROTOCOL", "SGLANG_DISAGGREGATION_NIXL_BACKEND")

Fingerprint = dict[str, dict[str, str]]  # role -> field -> value


def _connector_config(view: views.EngineView) -> str:
    if view.engine == "vllm":
        config = {k: v for k, v in view.kv_config().items() if k not in _ROLE_KEYS}
        return json.dumps(config, sort_keys=True)
    flags = {k: v for k, v in view.flags.items() if k.startswith("--disaggregation-") and k not in _SGLANG_ROLE_FLAGS}
    return json.dumps(flags, sort_keys=True)


def _attention_backend(view: views.EngineView) -> str:
    names = ("--attention-backend", "--prefill-attention-backend", "--decode-attention-backend")
    values = [f"{n}={view.flags[n][0] if view.flags[n] else 'true'}" for n in names if n in view.flags]
    if "VLLM_ATTENTION_BACKEND" in view.env:
        values.append(f"VLLM_ATTENTION_BACKEND={view.env['VLLM_ATTENTION_BACKEND']}")
    return ",".join(values) or "default"


def _speculative(view: views.EngineView) -> str:
    values = [f"{k}={' '.join(v) or 'true'}" for k, v in sorted(view.flags.items()) if k.startswith("--speculative")]
    return ",".join(values) or "off"


def _of(view: views.EngineView) -> dict[str, str]:
    meta = view.lws.get("metadata") or {}
    env = view.env
    return {
        "engine": view.engine,
        # The image too, not only the declared version: a new image is in general a new engine
        # build, and vLLM's NIXL handshake compares the running version, not the blueprint's.
        "engine_image": str(view.container.get("image", "")),
        "engine_version": (meta.get("labels") or {}).get(VERSION_LABEL, ""),
        "connector": view.kv_library,
        "connector_config": _connector_config(view),
        "transport_env": ",".join(f"{k}={env[k]}" for k in TRANSPORT_ENV if k in env) or "none",
        # How the KV heads and layers are sharded over the role's ranks.
        "attention_tp": str(view.attention_tp),
        "pp": str(view.pp),
        "block_size": view.block_size,
        "kv_cache_dtype": view.kv_cache_dtype,
        "dtype": view.flag("--dtype"),
        "attention_backend": _attention_backend(view),
        "speculative": _speculative(view),
        "model": view.model,
        "model_revision": (meta.get("annotations") or {}).get(MODEL_REVISION_ANNOTATION, ""),
    }


def fingerprint(manifests: list[dict]) -> Fingerprint:
    """Per role, the KV-relevant settings of its leader engine."""
    return {v.role: _of(v) for v in views.engines(manifests) if v.leader}


def differences(live: Fingerprint, candidate: Fingerprint) -> list[str]:
    """One line per role and field that differs (``decode block_size: 64 -> 128``); empty: the
    candidate's engines can exchange KV with the live ones."""
    out = []
    for role in sorted(set(live) | set(candidate)):
        old, new = live.get(role), candidate.get(role)
        if old is None or new is None:
            out.append(f"{role}: {'only in the candidate' if old is None else 'missing from the candidate'}")
            continue
        out += [f"{role} {field}: {old.get(field, '')} -> {new.get(field, '')}"
                for field in new if old.get(field, "") != new.get(field, "")]
    return out
