"""One file being staged: parts written at their offsets, hashed strictly in order, then renamed.

Parts finish in any order; whichever worker completes the next part in line hashes it and any
parts queued behind it (hashlib releases the GIL, so other workers keep downloading). Only a
file whose digest matches the manifest is fsynced and renamed to its final name.

Parts are written with O_DIRECT where the filesystem allows it (``direct=True``): straight from
the part buffer to the disk. Buffered writes copy every byte into freshly allocated page-cache
pages, which on the 2-core benchmark VM cost 1-4 times the CPU of the SHA-256 itself
(scripts/bench/staging.py), and leave hundreds of GB of dirty pages for the final fsync. The
unaligned tail of a file, and every write where O_DIRECT is refused, goes through the page cache
as before; the fsync before the rename covers both. The hash is taken from the same buffer.
"""

from __future__ import annotations

import errno
import json
import os
import threading

from stager_files import LocalIOError, new_hasher, part_count, part_len, write_record

ALIGN = 4096  # O_DIRECT wants offset, length and buffer aligned to the logical block size (<= 4 KiB)


class FileJob:
    def __init__(self, plan, part_size, stats, out, direct=False):
        self.plan, self.entry, self.stats, self.out = plan, plan.entry, stats, out
        self.direct = direct and hasattr(os, "O_DIRECT")
        self.size, self.part_size = plan.entry["size"], plan.part_size
        self.nparts = part_count(self.size, self.part_size)
        self.local = set(range(self.nparts)) if plan.state == "verify-final" else set(plan.parts)
        self.local_bytes = sum(self.part_length(i) for i in self.local)
        self.algorithm, self.hasher, self.expected = new_hasher(self.entry)
        self.fd = self.journal_fd = self.direct_fd = None
        self.next, self.pending, self.draining = 0, {}, False
        self.fetched = 0
        self.needs_redo = self.completed = False
        self.failed = None  # the reason, once the stager gave up on this file
        self.lock = threading.Lock()

    def part_length(self, index):
        return part_len(self.size, self.part_size, index)

    def has_part(self, index):
        return index in self.local

    def _open(self):
        """Open lazily (the schedule opens a few files at a time), under the job lock."""
        with self.lock:
            if self.fd is not None:
                return
            try:
                if self.plan.state == "verify-final":
                    self.fd = os.open(self.plan.final, os.O_RDONLY)
                    return
                os.makedirs(os.path.dirname(self.plan.final), exist_ok=True)
                if self.plan.state == "resume":
                    self.fd = os.open(self.plan.partial, os.O_RDWR)
                else:
                    for stale in (self.plan.final, self.plan.partial, self.plan.journal):
                        _unlink(stale)
                    self.fd = os.open(self.plan.partial, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
                    _reserve(self.fd, self.size)
                    with open(self.plan.journal, "w") as j:
                        j.write(json.dumps(self.plan.journal_header(), sort_keys=True) + "\n")
                self.journal_fd = os.open(self.plan.journal, os.O_WRONLY | os.O_APPEND)
                if self.direct:
                    self.direct_fd = _open_direct(self.plan.partial)
            except OSError as e:
                raise LocalIOError(e.errno, "{}: {}".format(self.plan.final, e.strerror)) from e

    def read_part(self, index, view):
        self._open()
        got, offset = 0, index * self.part_size
        while got < len(view):
            n = os.preadv(self.fd, [view[got:]], offset + got)
            if n <= 0:
                raise LocalIOError(0, "{}: short read".format(self.plan.final))
            got += n
        self.stats.add(done=len(view))

    def write_part(self, index, view):
        self._open()
        try:
            offset = index * self.part_size
            done = self._write_direct(view, offset)
            while done < len(view):
                done += os.pwrite(self.fd, view[done:], offset + done)
            os.write(self.journal_fd, "{}\n".format(index).encode())
        except OSError as e:
            raise LocalIOError(e.errno, "{}: {}".format(self.plan.partial, e.strerror)) from e
        self.fetched += len(view)

    def _write_direct(self, view, offset):
        """Write the aligned head of ``view`` with O_DIRECT; returns the bytes written (maybe 0)."""
        end, done = len(view) - len(view) % ALIGN, 0
        if self.direct_fd is None or not self.direct or offset % ALIGN:
            return 0
        while done < end:
            try:
                n = os.pwrite(self.direct_fd, view[done:end], offset + done)
            except OSError as e:
                if e.errno != errno.EINVAL:
                    raise
                self.direct = False  # refused after all (alignment, filesystem): page cache from now on
                return done
            if n <= 0:
                return done
            done += n
            if n % ALIGN:  # a short, unaligned write: the rest goes through the page cache
                return done
        return done

    def part_ready(self, index, view, release, stager):
        """Queue a finished part; the first thread to find the next one in line hashes the run."""
        with self.lock:
            self.pending[index] = (view, release)
            if self.draining:
                return
            self.draining = True
        while True:
            with self.lock:
                item = self.pending.pop(self.next, None)
                if item is None:
                    self.draining = False
                    return
            self.hasher.update(item[0])
            item[1]()
            self.next += 1
            if self.next == self.nparts:
                self.finalize(stager)

    def finalize(self, stager):
        self._open()  # zero-byte files never saw a part
        digest = self.hasher.hexdigest()
        if digest != self.expected:
            return self._mismatch(stager, digest)
        try:
            if self.plan.state != "verify-final":
                os.fsync(self.fd)
                self.close()
                os.rename(self.plan.partial, self.plan.final)
                _fsync_dir(os.path.dirname(self.plan.final))
                _unlink(self.plan.journal)
            write_record(self.plan.dest, self.entry["path"], self.entry, self.plan.final)
        except OSError as e:
            return stager.fail(self, "write-failed", "{}: {}".format(self.plan.final, e))
        finally:
            self.close()
        self.completed = True
        self.stats.add(files_=1)
        self.out("file", key=self.entry["key"], path=self.entry["path"], bytes=self.size,
                 bytes_fetched=self.fetched, status=self.plan.state, algorithm=self.algorithm)

    def _mismatch(self, stager, digest):
        self.close()
        if self.plan.state == "verify-final":
            _unlink(self.plan.final)  # an unrecorded file that fails its hash is not ours to keep
        else:
            _unlink(self.plan.partial)
            _unlink(self.plan.journal)
        self.stats.add(done=-self.size)
        if self.plan.state == "fresh":
            return stager.fail(self, "checksum-mismatch", "{} expected {}, got {} ({} bytes)".format(
                self.algorithm, self.expected, digest, self.size))
        self.needs_redo = True  # local bytes were bad (a torn resume): fetch the whole file once

    def discard(self):
        """Drop the partial file and its journal (never the final name, which only verified bytes reach)."""
        if self.plan.state != "verify-final":
            _unlink(self.plan.partial)
            _unlink(self.plan.journal)

    def close(self):
        for name in ("fd", "journal_fd", "direct_fd"):
            fd = getattr(self, name)
            if fd is not None:
                setattr(self, name, None)
                os.close(fd)


def _reserve(fd, size):
    """Allocate the whole file now so the disk cannot fill up half-way (where supported)."""
    if size:
        try:
            os.posix_fallocate(fd, 0, size)
        except OSError as e:
            if e.errno not in (95, 22):  # EOPNOTSUPP, EINVAL: the filesystem cannot preallocate
                raise


def _open_direct(path):
    """A second, O_DIRECT descriptor on ``path``, or None where the filesystem refuses it."""
    try:
        return os.open(path, os.O_WRONLY | os.O_DIRECT)
    except OSError as e:
        if e.errno in (errno.EINVAL, errno.EOPNOTSUPP):
            return None
        raise


def _fsync_dir(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _unlink(path):
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
