"""The numeric targets of the bundled, self-authored SciCode fixture problems (901–903), in the
layout of upstream's test_data.h5 ("{step}/test{k}/var{n}"), computed from the closed-form
answers of these problems. The official file is not bundled (SRBENCH_SCICODE_H5 points at it);
this one lets the demo and tests grade the fixture problems for real."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def _tof(v0: float, theta: float, g: float) -> float:
    return 2 * v0 * np.sin(theta) / g


def _daughter(n0: float, la: float, lb: float, t: float) -> float:
    return n0 * la / (lb - la) * (np.exp(-la * t) - np.exp(-lb * t))


def _stats(x: np.ndarray) -> tuple[float, float, float]:
    mean = float(np.mean(x))
    var = float(np.var(x, ddof=1))
    return mean, var, float(np.sqrt(var / len(x)))


def fixture_targets() -> dict[str, tuple[float, ...]]:
    a = np.array([1.0, 2.0, 6.0])
    b = np.array([2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0])
    mean_b, _, se_b = _stats(b)
    return {
        "901.1/test1": (_tof(10.0, np.pi / 4, 9.81),),
        "901.1/test2": (_tof(3.0, np.pi / 2, 9.81),),
        "901.2/test1": (10.0 * np.cos(np.pi / 4) * _tof(10.0, np.pi / 4, 9.81),),
        "901.2/test2": (20.0 * np.cos(np.pi / 6) * _tof(20.0, np.pi / 6, 1.62),),
        "902.1/test1": (1000.0 * np.exp(-0.1 * 5.0),),
        "902.2/test1": (_daughter(1000.0, 0.1, 0.05, 5.0),),
        "902.2/test2": (_daughter(500.0, 0.3, 0.02, 12.0),),
        "902.3/test1": (np.log(0.1 / 0.05) / (0.1 - 0.05),),
        "903.1/test1": (_stats(a)[0],),
        "903.2/test1": (_stats(a)[1],),
        "903.3/test1": (se_b,),
        "903.4/test1": (mean_b - 1.959964 * se_b, mean_b + 1.959964 * se_b),
    }


def write_fixture_test_data(path: Path) -> Path:
    """Write the fixture targets as an HDF5 file (idempotent: same bytes of data each time)."""
    import h5py

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with h5py.File(path, "w") as f:
        for key, values in fixture_targets().items():
            for n, value in enumerate(values, start=1):
                f[f"{key}/var{n}"] = value
    return path
