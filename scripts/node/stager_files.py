"""The on-node stager's local side: what is already on disk, partial files, in-order hashing.

Standard library only (Python 3.8+), shipped with stage_weights.py. Three kinds of file state:
a final file recorded in ``.pdlift-staged.json`` with its size and mtime (verified, skipped); a
``NAME.pdlift-partial`` with a journal of parts already written (resumed by range); anything
else is fetched fresh. A final file with no matching record is hashed before it is trusted.
"""

from __future__ import annotations

import collections
import hashlib
import json
import mmap
import os
import posixpath
import threading

RECORDS = ".pdlift-staged.json"
PARTIAL = ".pdlift-partial"
JOURNAL = ".pdlift-parts"
_records_lock = threading.Lock()


class ManifestError(ValueError):
    pass


class LocalIOError(OSError):
    """Writing or reading the local disk failed (not the network)."""


def load_manifest(raw):
    doc = json.loads(raw)
    if not isinstance(doc, dict) or doc.get("version") != 1 or not isinstance(doc.get("objects"), list):
        raise ManifestError("not a pdlift staging manifest (version 1)")
    for o in doc["objects"]:
        path = o.get("path") if isinstance(o, dict) else None
        if (not isinstance(path, str) or not path or path.startswith("/") or ".." in path.split("/")
                or posixpath.normpath(path) != path or not isinstance(o.get("size"), int) or o["size"] < 0):
            raise ManifestError("bad manifest entry for key {!r}".format(o.get("key") if isinstance(o, dict) else o))
    return doc


def algorithms():
    try:
        from awscrt import checksums  # noqa: F401  (only for CRC64NVME-only objects)
        return ["sha256", "crc64nvme"]
    except ImportError:
        return ["sha256"]


def can_verify(entry):
    return bool(entry.get("sha256")) or (bool(entry.get("crc64nvme")) and "crc64nvme" in algorithms())


class Crc64Nvme:
    def __init__(self):
        from awscrt import checksums
        self._fn, self._crc = checksums.crc64nvme, 0

    def update(self, data):
        self._crc = self._fn(data, self._crc)

    def hexdigest(self):
        return "{:016x}".format(self._crc)


def new_hasher(entry):
    """(algorithm, hasher, expected hex digest) for one manifest entry; SHA-256 preferred."""
    if entry.get("sha256"):
        return "sha256", hashlib.sha256(), entry["sha256"]
    return "crc64nvme", Crc64Nvme(), entry["crc64nvme"]


def free_bytes(path):
    while not os.path.exists(path):
        path = os.path.dirname(path) or "/"
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def read_records(dest):
    try:
        with open(os.path.join(dest, RECORDS)) as f:
            return json.load(f).get("files", {})
    except (OSError, ValueError, AttributeError):
        return {}


def write_record(dest, path, entry, final):
    st = os.stat(final)
    with _records_lock:
        records = read_records(dest)
        records[path] = {"key": entry["key"], "size": entry["size"], "etag": entry.get("etag"),
                         "sha256": entry.get("sha256"), "crc64nvme": entry.get("crc64nvme"),
                         "mtime_ns": st.st_mtime_ns}
        tmp = os.path.join(dest, RECORDS + ".tmp")
        with open(tmp, "w") as f:
            json.dump({"version": 1, "files": records}, f, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, os.path.join(dest, RECORDS))


class FilePlan:
    """One manifest entry and what is on disk for it: verified, verify-final, resume or fresh."""

    def __init__(self, entry, dest, part_size, state="fresh", parts=()):
        self.entry, self.dest, self.part_size = entry, dest, part_size
        self.final = os.path.join(dest, entry["path"])
        self.partial = self.final + PARTIAL
        self.journal = self.final + JOURNAL
        self.state, self.parts = state, frozenset(parts)

    def fresh(self):
        return FilePlan(self.entry, self.dest, self.part_size)

    def journal_header(self):
        e = self.entry
        return {"key": e["key"], "size": e["size"], "etag": e.get("etag"), "part_size": self.part_size,
                "sha256": e.get("sha256"), "crc64nvme": e.get("crc64nvme")}


def plan_files(manifest, dest, part_size):
    records = read_records(dest)
    plans = []
    for e in manifest["objects"]:
        plan = FilePlan(e, dest, part_size)
        rec = records.get(e["path"])
        if os.path.isfile(plan.final):
            st = os.stat(plan.final)
            same = rec and all(rec.get(k) == e.get(k) for k in ("key", "size", "etag", "sha256", "crc64nvme"))
            if same and st.st_size == e["size"] and rec.get("mtime_ns") == st.st_mtime_ns:
                plan.state = "verified"
            elif st.st_size == e["size"]:
                plan.state = "verify-final"  # unrecorded: hash it before trusting it
        elif os.path.isfile(plan.partial):
            parts = _journal_parts(plan)
            if parts is not None and os.stat(plan.partial).st_size == e["size"]:
                plan.state, plan.parts = "resume", frozenset(parts)
        plans.append(plan)
    return plans


def _journal_parts(plan):
    try:
        with open(plan.journal) as f:
            lines = f.read().split("\n")
        if json.loads(lines[0]) != plan.journal_header():
            return None
        # the last line may be torn by a kill; only complete lines count
        return {int(x) for x in lines[1:-1] if x.isdigit()}
    except (OSError, ValueError):
        return None


def part_count(size, part_size):
    return -(-size // part_size)


def part_len(size, part_size, index):
    return min(part_size, size - index * part_size)


def needed_bytes(plans):
    """Bytes the disk must still take: all of a fresh file, the unallocated rest of a partial one."""
    total = 0
    for p in plans:
        if p.state == "fresh":
            total += p.entry["size"]
        elif p.state == "resume":
            total += max(0, p.entry["size"] - os.stat(p.partial).st_blocks * 512)
    return total


def present_bytes(plans):
    total = 0
    for p in plans:
        if p.state in ("verified", "verify-final"):
            total += p.entry["size"]
        elif p.state == "resume":
            total += sum(part_len(p.entry["size"], p.part_size, i) for i in p.parts)
    return total


class Schedule:
    """Parts in order, interleaved across ``open_files`` files so hashing runs on several cores."""

    def __init__(self, jobs, open_files):
        self._waiting = collections.deque(j for j in jobs if j.nparts)
        self._open, self._turn, self._open_files = [], 0, open_files
        self._lock = threading.Lock()
        self.parts = sum(j.nparts for j in jobs)

    def next(self):
        with self._lock:
            while len(self._open) < self._open_files and self._waiting:
                self._open.append([self._waiting.popleft(), 0])
            if not self._open:
                return None
            slot = self._open[self._turn % len(self._open)]
            self._turn += 1
            job, index = slot[0], slot[1]
            slot[1] += 1
            if slot[1] == job.nparts:
                self._open.remove(slot)
            return job, index


class BufferPool:
    """Reusable part buffers: bounds memory to ``count`` parts in flight or waiting to be hashed.

    Anonymous mmaps rather than bytearrays: they are page-aligned, which O_DIRECT writes need.
    """

    def __init__(self, count, size):
        self._free = collections.deque()
        self._made, self._count, self._size = 0, count, size
        self._cond = threading.Condition()

    def take(self, stop):
        with self._cond:
            while not self._free and self._made >= self._count:
                if stop.is_set():
                    return None
                self._cond.wait(0.2)
            if self._free:
                return self._free.pop()
            self._made += 1
        # private (not the default shared, shmem-backed) so that transparent huge pages apply
        buf = mmap.mmap(-1, self._size, flags=mmap.MAP_PRIVATE)
        if hasattr(buf, "madvise") and hasattr(mmap, "MADV_HUGEPAGE"):
            buf.madvise(mmap.MADV_HUGEPAGE)  # one fault and one pinned folio per 2 MiB, not per 4 KiB
        return buf

    def give(self, buf):
        with self._cond:
            self._free.append(buf)
            self._cond.notify()
