"""What goes into and comes out of a sandbox (runs/engine/sandbox.py): the input archive of
`files`, the output pipes read together under one deadline, the driver's report lines and the
files `collect` brings out. Split out of :mod:`runs.engine.sandbox`.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import selectors
import tarfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import BinaryIO, Literal

from runs.engine.sandbox_files import safe_relpath

__all__ = [
    "COLLECT_MAX_BYTES",
    "DISK_FULL_SLACK_BYTES",
    "READ_CHUNK",
    "REPORT_MAX_BYTES",
    "OutputPipes",
    "Report",
    "children_cpu",
    "collected_files",
    "files_archive",
    "parse_report",
]

READ_CHUNK = 65536
# The budget counts as used up when less than this is left when the program ends: a write past
# it fills the tmpfs to its last page before failing.
DISK_FULL_SLACK_BYTES = 64 * 1024
# What `collect` may bring out in all (a reward file is a few bytes).
COLLECT_MAX_BYTES = 1024 * 1024
REPORT_MAX_BYTES = 64 * 1024
_TIMES_FIELD = re.compile(r"(?P<m>\d+)m(?P<s>\d+(?:\.\d+)?)s")


def files_archive(files: Mapping[str, bytes], out: BinaryIO) -> None:
    """`files` (relative paths) as a tar archive: directories 0755, files 0644, scripts starting
    with `#!` 0755 (as a checkout would have them). Unpacked inside, by the sandbox uid."""
    now = time.time()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.GNU_FORMAT) as archive:
        for name, data in files.items():
            rel = safe_relpath(name)
            info = tarfile.TarInfo(str(rel))
            info.size = len(data)
            info.mode = 0o755 if data.startswith(b"#!") else 0o644
            info.mtime = now
            archive.addfile(info, io.BytesIO(data))


def collected_files(archive: bytes, wanted: Sequence[str]) -> dict[str, bytes]:
    """The regular files of an archive the sandbox made, by sandbox path; anything else (a
    symlink, a device, a name not asked for) is left out. Read from memory only."""
    names = {str(PurePosixPath(p).relative_to("/")): p for p in wanted}
    found: dict[str, bytes] = {}
    try:
        with tarfile.open(fileobj=io.BytesIO(archive), mode="r:") as tar:
            for member in tar:
                if member.isreg() and member.name in names:
                    handle = tar.extractfile(member)
                    if handle is not None:
                        found[names[member.name]] = handle.read()
    except tarfile.TarError:
        pass  # cut at the cap or empty: what was read so far stands
    return found


class OutputPipes:
    """The sandbox's output pipes, read together under one deadline: stdout and stderr (capped
    together), the report lines, and the archives going out (the snapshot straight to its file,
    capped at the budget; `collect` into memory)."""

    def __init__(self, output_cap: int) -> None:
        self.selector = selectors.DefaultSelector()
        self.output_cap = output_cap
        self.output_total = 0
        self.buffers: dict[int, list[bytes]] = {}
        self.limits: dict[int, int] = {}
        self.sinks: dict[int, BinaryIO] = {}
        self.sizes: dict[int, int] = {}
        self.on_data: dict[int, Callable[[bytes], None]] = {}

    def add(self, fd: int, *, cap: int | None = None, sink: BinaryIO | None = None) -> None:
        os.set_blocking(fd, False)
        self.selector.register(fd, selectors.EVENT_READ)
        self.buffers[fd] = []
        self.sizes[fd] = 0
        if cap is not None:
            self.limits[fd] = cap
        if sink is not None:
            self.sinks[fd] = sink

    def data(self, fd: int) -> bytes:
        return b"".join(self.buffers[fd])

    def read(
        self, deadline: float, output_fds: tuple[int, int], on_output_cap: Callable[[], None]
    ) -> Literal["timeout", "disk_quota_exceeded"] | None:
        """Until every pipe is closed: None; or why the sandbox must be killed now."""
        capped = False
        while self.selector.get_map():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return "timeout"
            for key, _ in self.selector.select(timeout=min(remaining, 0.2)):
                fd = int(key.fd)
                try:
                    chunk = os.read(fd, READ_CHUNK)
                except BlockingIOError:
                    continue
                if not chunk:
                    self.selector.unregister(fd)
                    continue
                self.sizes[fd] += len(chunk)
                if fd in output_fds:
                    room = self.output_cap - self.output_total
                    self.buffers[fd].append(chunk[: max(room, 0)])
                    self.output_total += len(chunk)
                    if self.output_total > self.output_cap and not capped:
                        capped = True
                        on_output_cap()
                elif fd in self.sinks:
                    if self.sizes[fd] > self.limits[fd]:
                        return "disk_quota_exceeded"
                    self.sinks[fd].write(chunk)
                else:
                    room = self.limits.get(fd, len(chunk)) - (self.sizes[fd] - len(chunk))
                    self.buffers[fd].append(chunk[: max(room, 0)])
                    if fd in self.on_data:
                        self.on_data[fd](chunk)
        return None

    def drain(self, fd: int) -> None:
        """What is left in a capped pipe after the sandbox was killed."""
        with contextlib.suppress(OSError):
            while chunk := os.read(fd, READ_CHUNK):
                room = self.limits.get(fd, len(chunk)) - self.sizes[fd]
                self.sizes[fd] += len(chunk)
                self.buffers[fd].append(chunk[: max(room, 0)])

    def close(self) -> None:
        self.selector.close()


@dataclass
class Report:
    """What the driver and the shim said about a run (absent items stay None/False)."""

    started: bool = False
    stopped: str | None = None
    exit_code: int | None = None
    cpu_s: float | None = None
    disk: tuple[int, int, int] | None = None  # block size, blocks, free blocks
    snapshot: int | None = None  # tar's exit status

    def disk_full(self, budget: int) -> bool:
        if self.disk is None:
            return False
        block, _, free = self.disk
        return block * free <= min(DISK_FULL_SLACK_BYTES, budget // 8)


def parse_report(raw: bytes) -> Report:
    """The driver's and the shim's lines: `restored N`, `started`, `stopped why`, `times` and
    bash's two `times` lines, `exit N`, `disk B N F`, `snapshot N`, `collect N`."""
    report = Report()
    times: list[str] = []
    for line in raw.decode("ascii", "replace").splitlines():
        word, _, rest = line.partition(" ")
        if line == "started":
            report.started = True
        elif word == "stopped":
            report.stopped = rest
        elif word == "exit" and rest.isdigit():
            report.exit_code = int(rest)
        elif word == "disk":
            parts = rest.split()
            if len(parts) == 3 and all(p.isdigit() for p in parts):
                report.disk = (int(parts[0]), int(parts[1]), int(parts[2]))
        elif word == "snapshot" and rest.isdigit():
            report.snapshot = int(rest)
        elif _TIMES_FIELD.match(line):
            times.append(line)
    if len(times) >= 2:
        report.cpu_s = children_cpu(f"{times[0]}\n{times[1]}".encode())
    return report


def children_cpu(report: bytes) -> float | None:
    """User+system seconds from bash's `times` second line ("0m1.250s 0m0.010s")."""
    lines = report.decode("ascii", "replace").splitlines()
    if len(lines) < 2:
        return None
    total = 0.0
    for field_ in lines[1].split():
        match = _TIMES_FIELD.fullmatch(field_)
        if match is None:
            return None
        total += int(match["m"]) * 60 + float(match["s"])
    return total
