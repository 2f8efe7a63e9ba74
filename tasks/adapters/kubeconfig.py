"""An ApiClient from a kubeconfig (KUBECONFIG), its credential loaded once per process.

Loading a kubeconfig runs its exec credential plugin: `aws eks get-token` where `aws eks
update-kubeconfig` wrote it (``tasks.adapters.eks_token`` in the sandbox), a process of its own and
0.3-1 s each time. A flow opens a ``Wiring`` per task, so loading per client ran the plugin once
for each task that touched the cluster. Here the loaded configuration is kept per kubeconfig (its
files' paths and modification times, so an edit or a context switch loads it again) and shared by
the clients made from it. Its credential is renewed as the kubernetes client renews any exec
credential: its refresh hook runs the plugin again once the credential is within 5 minutes of the
ExecCredential's expirationTimestamp (kubernetes/config/kube_config.py, ``_set_config`` and
``_is_expired``), as client-go keeps an exec credential until it expires.
"""

from __future__ import annotations

import os
import threading

from kubernetes import client as k8s
from kubernetes import config as k8s_config

from tasks.errors import ConfigError

# KUBECONFIG value -> (its files' modification times, the configuration loaded from them)
_loaded: dict[str, tuple[tuple[float | None, ...], k8s.Configuration]] = {}
_lock = threading.Lock()


def _stamp(path: str) -> tuple[float | None, ...]:
    """Each file of a KUBECONFIG value's modification time (None: absent)."""
    stamps = []
    for part in path.split(os.pathsep):
        try:
            stamps.append(os.stat(part).st_mtime_ns if part else None)
        except OSError:
            stamps.append(None)
    return tuple(stamps)


def _configuration(path: str) -> k8s.Configuration:
    """The configuration of ``path``'s current context, loaded (its exec plugin run) only when
    this process has not loaded these files as they are now."""
    stamp = _stamp(path)
    with _lock:
        kept = _loaded.get(path)
        if kept is not None and kept[0] == stamp:
            return kept[1]
        config = type.__call__(k8s.Configuration)
        k8s_config.load_kube_config(config_file=path, client_configuration=config)
        _loaded[path] = (stamp, config)
        return config


def api_client_from_kubeconfig(path: str, cluster: str) -> k8s.ApiClient:
    """An ApiClient for the current context of the kubeconfig ``path`` (a KUBECONFIG value, so a
    colon-separated list works). Refuses a context whose cluster is not ``cluster`` (equal, or an
    EKS ARN ending in ``/cluster``): a stale KUBECONFIG must not deploy to the wrong cluster."""
    try:
        _, current = k8s_config.list_kube_config_contexts(config_file=path)
        context_cluster = str(((current or {}).get("context") or {}).get("cluster", ""))
        if context_cluster != cluster and not context_cluster.endswith("/" + cluster):
            raise ConfigError(f"KUBECONFIG ({path}) points at cluster {context_cluster!r}, but the blueprint "
                              f"deploys to {cluster!r}; switch the context or unset KUBECONFIG")
        return k8s.ApiClient(configuration=_configuration(path))
    except k8s_config.ConfigException as e:
        raise ConfigError(f"cannot use KUBECONFIG {path}: {e}") from e
    except OSError as e:
        raise ConfigError(f"cannot read KUBECONFIG {path}: {e}") from e
