"""The verifier's host files (runs/engine/sandbox_pythons.py `_host_file`) are written by every
sandbox that starts, and a worker starts as many at once as it has cores: concurrent writers
of the same file must each succeed and leave it whole (a shared partial name made one writer
move the other's partial away: FileNotFoundError, a failed cell — seen in
tests/security/test_hostile_agent_verifier.py)."""

from __future__ import annotations

import threading

from runs.engine import sandbox_pythons


def test_concurrent_writers_of_one_host_file_all_succeed() -> None:
    errors: list[BaseException] = []
    texts = [f"home = /x{i}\n" * 2000 for i in range(2)]
    start = threading.Barrier(8)

    def write(i: int) -> None:
        start.wait()
        try:
            for round_ in range(150):
                sandbox_pythons._host_file("race.cfg", texts[(i + round_) % 2])
        except BaseException as exc:  # noqa: BLE001 - collected for the assertion
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    path = sandbox_pythons._cfg_directory() / "race.cfg"
    assert path.read_text() in texts  # whole: one writer's text, never a mix
    assert not list(path.parent.glob("race.cfg*.new"))  # no partial left behind
