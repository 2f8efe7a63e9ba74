#!/usr/bin/env python3
"""Stage model weights from S3 to this node's NVMe: parallel ranged GETs, verified, resumable.

Shipped to each node over SFTP by ``tasks/stages/weights.py`` and run with the node's system python3
(3.8+, standard library only; see stager_s3.py for why). The manifest (JSON, from
``tasks/planning/staging.py``) arrives on stdin or as a file; credentials only in the environment.

    stage_weights.py probe --dest DIR --manifest -      # one JSON line: free, needed, present bytes
    stage_weights.py stage --dest DIR --manifest - [--concurrency 64 --part-size-mb 64 ...]

Per file: parts are fetched concurrently (more streams than line rate / 5 Gbps) into
``NAME.pdlift-partial`` with If-Match on the manifest's ETag (written with O_DIRECT unless
``--buffered``; see stager_job.py), hashed in order as parts complete, fsynced and renamed into
place only when the checksum matches. A journal beside the partial file
lists the parts on disk, so a killed run resumes by range; a verified file is recorded in
``.pdlift-staged.json`` and skipped next time. Progress goes to stdout as JSON lines.

Exit codes: 0 staged, 2 bad arguments or manifest, 3 not enough free space (nothing was
downloaded), 4 verification failed (named key; nothing unverified under a final name),
5 download failed after retries, 6 no usable credentials or access denied, 7 another stager
is already staging into the same directory.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import sys
import threading
import time

sys.dont_write_bytecode = True  # leave nothing but the shipped files on the node
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import stager_files as files  # noqa: E402
from stager_job import FileJob  # noqa: E402
from stager_s3 import S3Client, S3Error, get_range_retrying  # noqa: E402

EXIT = {"ok": 0, "usage": 2, "space": 3, "verify": 4, "download": 5, "access": 6, "busy": 7}
VERIFY_REASONS = {"checksum-mismatch", "changed-in-s3", "bad-manifest", "size-mismatch"}


class Printer:
    """JSON lines on stdout, one writer at a time."""

    def __init__(self, stream=sys.stdout):
        self._stream, self._lock = stream, threading.Lock()

    def __call__(self, event, **fields):
        line = json.dumps(dict(event=event, **fields), sort_keys=True)
        with self._lock:
            self._stream.write(line + "\n")
            self._stream.flush()


class Stats:
    def __init__(self, bytes_total, files_total):
        self.lock = threading.Lock()
        self.bytes_total, self.files_total = bytes_total, files_total
        self.bytes_done = self.bytes_fetched = self.files_done = self.retries = 0
        self.started = time.monotonic()

    def add(self, done=0, fetched=0, files_=0):
        with self.lock:
            self.bytes_done += done
            self.bytes_fetched += fetched
            self.files_done += files_


class Stager:
    def __init__(self, args, manifest, out):
        self.args, self.manifest, self.out = args, manifest, out
        self.client = S3Client()
        self.stop = threading.Event()
        self.failures = []  # (key, reason, detail)
        self.lock = threading.Lock()

    def fail(self, job, reason, detail):
        job.failed = reason
        with self.lock:
            self.failures.append((job.entry["key"], reason, detail))
        self.out("error", key=job.entry["key"], reason=reason, detail=detail)
        self.stop.set()  # fail fast: finish parts in flight, start no new ones

    def fetch_part(self, job, index, view):
        start = index * job.part_size
        retries = []
        get_range_retrying(self.client, self.manifest["bucket"], job.entry["key"], start, view,
                           job.entry.get("etag"), job.entry.get("version_id"), self.args.max_retries,
                           on_retry=retries.append, stop=self.stop)
        if retries:
            with self.stats.lock:
                self.stats.retries += len(retries)

    def worker(self, schedule, pool):
        # Take the buffer before the part: a dispatched part always holds one, so the part every
        # file's hashing waits on can always finish (no deadlock on a full pool).
        while not self.stop.is_set():
            buf = pool.take(self.stop)
            item = schedule.next() if buf is not None else None
            if item is None:
                if buf is not None:
                    pool.give(buf)
                return
            job, index = item
            handed = False  # once part_ready has the buffer, it alone gives it back
            try:
                view = memoryview(buf)[:job.part_length(index)]
                if job.has_part(index):
                    job.read_part(index, view)
                else:
                    self.fetch_part(job, index, view)
                    job.write_part(index, view)
                    self.stats.add(done=len(view), fetched=len(view))
                handed = True
                job.part_ready(index, view, lambda b=buf: pool.give(b), self)
            except Exception as e:  # includes connection errors after the last retry
                if not handed:
                    pool.give(buf)
                self.fail(job, *_classify(e))

    def run_pass(self, jobs):
        for job in jobs:
            if job.nparts == 0:
                job.finalize(self)
        schedule = files.Schedule(jobs, self.args.open_files)
        pool = files.BufferPool(self.args.concurrency + max(4, self.args.concurrency // 2), self.part_size)
        threads = [threading.Thread(target=self.worker, args=(schedule, pool), daemon=True)
                   for _ in range(min(self.args.concurrency, max(1, schedule.parts)))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for job in jobs:
            job.close()
            if job.failed in VERIFY_REASONS:
                job.discard()  # bytes of an object that changed are worth nothing for a resume

    def report(self):
        last = (time.monotonic(), 0)
        while not self.done.wait(self.args.progress_interval):
            last = self.progress(last)

    def progress(self, last):
        now, s = time.monotonic(), self.stats
        with s.lock:
            fetched, done, files_done = s.bytes_fetched, s.bytes_done, s.files_done
        rate = (fetched - last[1]) / max(now - last[0], 1e-6)
        self.out("progress", bytes_done=done, bytes_total=s.bytes_total, bytes_fetched=fetched,
                 files_done=files_done, files_total=s.files_total, rate_bps=round(rate),
                 elapsed_s=round(now - s.started, 3))
        return now, fetched

    def job(self, plan):
        return FileJob(plan, self.part_size, self.stats, self.out, direct=not self.args.buffered)

    def stage(self, plans):
        self.part_size = self.args.part_size_mb << 20
        total = sum(p.entry["size"] for p in plans)
        self.stats = Stats(total, len(plans))
        ready = [p for p in plans if p.state == "verified"]
        self.stats.add(done=sum(p.entry["size"] for p in ready), files_=len(ready))
        jobs = [self.job(p) for p in plans if p.state != "verified"]
        self.out("start", bytes_total=total, files_total=len(plans), files_present=len(ready),
                 bytes_present=self.stats.bytes_done + sum(j.local_bytes for j in jobs))
        self.done = threading.Event()
        reporter = threading.Thread(target=self.report, daemon=True)
        reporter.start()
        try:
            self.run_pass(jobs)
            redo = [j for j in jobs if j.needs_redo and not self.stop.is_set()]
            # a resumed or pre-existing file failed its hash: fetch it once more, whole
            again = [self.job(j.plan.fresh()) for j in redo]
            if again:
                self.run_pass(again)
            for job in [j for j in jobs if not j.needs_redo] + again:
                if not job.completed and not self.failures:  # a bug, never a silent success
                    self.fail(job, "download-failed", "file did not complete")
        finally:
            self.done.set()
            reporter.join()
        self.progress((time.monotonic(), self.stats.bytes_fetched))
        return self.finish()

    def finish(self):
        if not self.failures:
            s = self.stats
            secs = time.monotonic() - s.started
            self.out("done", bytes_total=s.bytes_total, bytes_fetched=s.bytes_fetched,
                     files_total=s.files_total, files_done=s.files_done, retries=s.retries,
                     elapsed_s=round(secs, 3), rate_bps=round(s.bytes_fetched / max(secs, 1e-6)))
            return EXIT["ok"]
        reasons = {r for _, r, _ in self.failures}
        if reasons & VERIFY_REASONS:
            return EXIT["verify"]
        return EXIT["access"] if "access-denied" in reasons else EXIT["download"]


def _classify(e):
    """(reason, detail) for a failed part; details carry no credentials (see stager_s3)."""
    if isinstance(e, S3Error):
        return _reason(e), str(e)
    if isinstance(e, files.LocalIOError):
        return "write-failed", str(e)
    return "download-failed", "{}: {}".format(type(e).__name__, str(e)[:200])


def _reason(e):
    if e.status == 412:
        return "changed-in-s3"
    if e.status in (401, 403) or e.code == "NoCredentials":
        return "access-denied"
    if e.status == 404:
        return "not-found"
    return "download-failed"


def parse_args(argv):
    p = argparse.ArgumentParser(prog="stage_weights.py")
    p.add_argument("mode", choices=("probe", "stage"))
    p.add_argument("--dest", required=True)
    p.add_argument("--manifest", default="-", help="manifest JSON file, or - for stdin")
    p.add_argument("--concurrency", type=int, default=64)
    p.add_argument("--part-size-mb", type=int, default=64)
    p.add_argument("--open-files", type=int, default=4, help="files downloaded (and hashed) at once")
    p.add_argument("--max-retries", type=int, default=8)
    p.add_argument("--free-margin", type=float, default=0.05)
    p.add_argument("--progress-interval", type=float, default=1.0)
    p.add_argument("--buffered", action="store_true", help="write through the page cache, not O_DIRECT")
    args = p.parse_args(argv)
    if args.concurrency < 1 or args.part_size_mb < 1 or args.open_files < 1:
        p.error("--concurrency, --part-size-mb and --open-files must be positive")
    return args


def main(argv=None):
    out = Printer()
    try:
        args = parse_args(argv)
        raw = sys.stdin.read() if args.manifest == "-" else open(args.manifest).read()
        manifest = files.load_manifest(raw)
    except (files.ManifestError, OSError, ValueError) as e:
        out("error", key=None, reason="bad-manifest", detail=str(e)[:300])
        return EXIT["usage"]
    plans = files.plan_files(manifest, args.dest, args.part_size_mb << 20)
    free = files.free_bytes(args.dest)
    needed, present = files.needed_bytes(plans), files.present_bytes(plans)
    if args.mode == "probe":
        out("probe", free_bytes=free, needed_bytes=needed, present_bytes=present,
            algorithms=files.algorithms(), files_total=len(plans))
        return EXIT["ok"]
    unsupported = [p.entry["key"] for p in plans if not files.can_verify(p.entry)]
    if unsupported:
        out("error", key=unsupported[0], reason="bad-manifest",
            detail="no checksum this node can compute for {} object(s)".format(len(unsupported)))
        return EXIT["usage"]
    want = int(needed * (1 + args.free_margin))
    if free < want:
        out("error", key=None, reason="insufficient-space",
            detail="{} needs {} bytes free (incl. margin), has {}".format(args.dest, want, free))
        return EXIT["space"]
    lock = _lock(args.dest)
    if lock is None:
        out("error", key=None, reason="busy", detail="another stager is staging into " + args.dest)
        return EXIT["busy"]
    with lock:  # held until exit; a killed stager releases it with its last file descriptor
        return Stager(args, manifest, out).stage(files.plan_files(manifest, args.dest, args.part_size_mb << 20))


def _lock(dest):
    os.makedirs(dest, exist_ok=True)
    f = open(os.path.join(dest, ".pdlift-staging.lock"), "w")
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        f.close()
        return None
    return f


if __name__ == "__main__":
    sys.exit(main())
