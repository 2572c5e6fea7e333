"""Sweeps: many serving runs, one per point of a grid, on a Dask cluster.

By default a local cluster of one single-threaded worker process per core starts for the
sweep and stops after it; given a scheduler address (`tcp://host:8786`) the points go to that
cluster instead. Dask (distributed) rather than a pool of our own: it ships the points to
workers anywhere, retries a lost worker's points, and its dashboard shows a long sweep.

The axes users sweep (issue 11, section VIII): the link bandwidth over the nine-point ladder,
the one-way latency, the device count, the KV precision and the batch size; any other field
of the run config can be an axis too.
"""
import csv
import dataclasses
import itertools
import logging
import math
import os
import pathlib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from tqdm import tqdm

from isa.config import parse_value

from .config import ServingConfig
from .engine import run
from .results import csv_column, summary_key

log = logging.getLogger(__name__)      # progress: the cluster a sweep runs on, and each point as it ends

# section VIII: 'nine points from 8 to 1800 GB/s, spanning the PCIe 5.0, CXL 3.1,
# NVLink-C2C, NVLink 5 and NVLink 6 classes'
LADDER_GB_S = (8, 16, 32, 64, 128, 256, 450, 900, 1800)
LATENCY_NS = (50, 100, 200, 500, 1000, 2000)            # Finding 4: 50 to 2000 ns
DEVICES = (1, 2, 4, 8, 16, 32, 64)                       # Fig. 13(c): up to 64 devices
KV_PRECISIONS = ("fp16", "int8", "int4")

# axis name -> (run config field, unit the axis is given in)
AXES = {"link_gb_s": ("link_bytes_per_s", 1e9), "latency_ns": ("link_latency_s", 1e-9),
        "devices": ("num_devices", 1), "batch": ("max_batch", 1)}


def axis_field(axis: str, value: Any) -> tuple[str, Any]:
    """The run config field and value of one axis point (link_gb_s=128 -> link_bytes_per_s=1.28e11)."""
    if axis in AXES:
        field, unit = AXES[axis]
        if unit == 1:
            if isinstance(value, bool) or not float(value).is_integer():
                raise ValueError(f"sweep axis {axis!r} takes integers, got {value!r}")
            return field, int(value)
        return field, float(value) * unit
    return axis, value


def points(base: ServingConfig, grid: Mapping[str, Sequence[Any]]) -> list[tuple[dict[str, Any], ServingConfig]]:
    """The cartesian product of `grid` (axis -> values) applied to `base`: [(labels, config)]."""
    names = list(grid)
    fields = {f.name for f in dataclasses.fields(base)}
    for axis in names:
        if AXES.get(axis, (axis,))[0] not in fields:
            raise ValueError(f"unknown sweep axis {axis!r}: use one of {sorted(AXES)} or a run config field")
    out = []
    for values in itertools.product(*(grid[n] for n in names)):
        labels = dict(zip(names, values, strict=True))
        out.append((labels, base.with_(**dict(axis_field(a, v) for a, v in labels.items()))))
    return out


def run_point(cfg: ServingConfig) -> dict[str, Any]:
    """One point's summary (what a worker returns; the step logs stay on the worker)."""
    return run(cfg, progress=False).summary()


def sweep(configs: Iterable[ServingConfig], address: str | None = None, workers: int | None = None,
          progress: bool = True, desc: str = "sweep") -> list[dict[str, Any]]:
    """Summaries of `configs`, in order, computed on a Dask cluster (local unless `address`)."""
    from dask.distributed import Client, LocalCluster, as_completed

    configs = list(configs)
    cluster: LocalCluster | None
    if address:
        client, cluster = Client(address), None
    else:
        cluster = LocalCluster(n_workers=workers or os.cpu_count() or 1, threads_per_worker=1,
                               processes=True, dashboard_address=":0")
        client = Client(cluster)
    log.info("%s: %d points on %s", desc, len(configs),
             address or f"a local cluster of {workers or os.cpu_count() or 1} worker processes")
    try:
        futures = client.map(run_point, configs, pure=False)
        index = {f.key: i for i, f in enumerate(futures)}
        results: list[Any] = [None] * len(configs)
        with tqdm(total=len(configs), desc=desc, unit="point", disable=not progress, mininterval=2.0) as bar:
            for future in as_completed(futures):
                results[index[future.key]] = future.result()
                bar.update()
                log.debug("%s: point %d of %d done", desc, index[future.key] + 1, len(configs))
        return results
    finally:
        client.close()
        if cluster is not None:
            cluster.close()


def write_csv(rows: Sequence[Mapping[str, Any]], path: str | pathlib.Path) -> pathlib.Path:
    """Rows (dicts: summaries, with a sweep's `axis_<name>` labels) to CSV, columns in
    first-seen order, each headed with its unit (serving.results.csv_column: `requests` as
    `requests_count`, `link_util` as `link_util_frac`); NaN as an empty cell."""
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    columns = list(dict.fromkeys(k for row in rows for k in row))
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, [csv_column(k) for k in columns])
        w.writeheader()
        for row in rows:
            w.writerow({csv_column(k): ("" if isinstance(v, float) and math.isnan(v) else v)
                        for k, v in row.items()})
    return path


CSV_BOOLS = {"True": True, "False": False}     # how csv writes Python's booleans


def read_csv(path: str | pathlib.Path) -> list[dict[str, Any]]:
    """Rows written by write_csv under the summary's keys (serving.results.summary_key:
    `requests_count` as `requests`; a CSV from before the units reads the same), numbers
    parsed back (an empty cell is NaN)."""
    with pathlib.Path(path).open(newline="") as f:
        return [{summary_key(k): math.nan if v == "" else CSV_BOOLS.get(v, parse_value(v)) for k, v in row.items()}
                for row in csv.DictReader(f)]
