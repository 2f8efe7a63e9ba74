"""Prefect result storage in the state store, beside the ledger.

A suspended flow run resumes in a new process, often a new pod with an empty disk, and runs again
from the top; the tasks whose results it must replay (the benchmark's measurement, the gate's
verdict: ``tasks.benchmark``) persist them here, under ``results/``, so the replay finds them
wherever it runs. Prefect reads and writes results through a ``WritableFileSystem`` block; this
one is saved on the server under a name derived from the store's URI (Prefect keeps only a
saved block's id in a result record, and refuses unsaved ones on a task), and holds nothing but
that URI: a process that loads it reaches the store from its own environment (for S3, the
worker's credentials and AWS_ENDPOINT_URL_S3), never from anything stored on the server.
"""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path
from typing import Any

from prefect.filesystems import WritableFileSystem
from prefect.settings import PREFECT_API_URL
from pydantic import PrivateAttr

from tasks.adapters.state_store import StateStore, open_uri

PREFIX = "results"
_SAVED: dict[tuple[str, str], "StateStoreResults"] = {}  # (Prefect API, store URI) -> the saved block


class StateStoreResults(WritableFileSystem):
    _block_type_name = "pdlift state store results"
    _block_type_slug = "pdlift-state-store-results"

    uri: str = ""  # the state store's (results live under its results/)
    region: str | None = None  # of the S3 store's client
    _store: Any = PrivateAttr(default=None)

    @classmethod
    def over(cls, store: StateStore, region: str | None = None) -> "StateStoreResults":
        """The block for ``store``, saved on the Prefect server once per process and store."""
        api = str(PREFECT_API_URL.value())
        saved = _SAVED.get((api, store.uri))
        if saved is None:
            saved = cls(uri=store.uri, region=region)
            saved.save("pdlift-results-" + hashlib.sha256(store.uri.encode()).hexdigest()[:12], overwrite=True)
            _SAVED[(api, store.uri)] = saved
        saved._store = store
        return saved

    def _the_store(self) -> StateStore:
        if self._store is None:  # loaded by Prefect from the server: reach the store from here
            self._store = open_uri(self.uri, Path(self.uri), self.region)
        return self._store

    def _key(self, path: str) -> str:
        return f"{PREFIX}/{str(path).lstrip('/')}"

    # Prefect calls the sync methods with _sync=True (call_explicitly_sync_block_method).
    def read_path(self, path: str, _sync: bool = True) -> bytes:
        got = self._the_store().get(self._key(path))
        if got is None:
            raise FileNotFoundError(f"{self.uri}/{PREFIX}/{path}")  # Prefect reads it as "not cached"
        return got.data

    def write_path(self, path: str, content: bytes, _sync: bool = True) -> str:
        self._the_store().put(self._key(path), content)
        return path

    async def aread_path(self, path: str) -> bytes:
        return await asyncio.to_thread(self.read_path, path)

    async def awrite_path(self, path: str, content: bytes) -> str:
        return await asyncio.to_thread(self.write_path, path, content)
