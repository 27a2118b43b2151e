"""Devices, their measured speed profiles, and the links between them.

A :class:`ClusterSpec` is what the planner knows about the hardware: for each
device its speed as a function of problem size (FLOP/s measured at several
work sizes), its memory, and one link model (bandwidth, latency) for the
collectives. It is plain data, saved as JSON; building one does not import
TensorFlow. :func:`meshpar.runtime.profiling.profile_local_devices` measures the
local devices with real TensorFlow conv3d kernels.

Example
-------
>>> cluster = ClusterSpec.from_speeds([0.8, 0.5, 0.3, 0.2])
>>> [round(d.speed_at(1e9) / 1e11, 2) for d in cluster.devices]
[0.8, 0.5, 0.3, 0.2]
"""
from __future__ import annotations

import math
import numbers
import os
from dataclasses import dataclass, field, replace
from typing import Optional, Sequence

import numpy as np

from meshpar.planning.jsonio import load_json, save_json_atomic

#: FLOP/s of a device of relative speed 1.0 in synthetic clusters.
REFERENCE_FLOPS = 1e11
#: Memory of a synthetic device (bytes).
DEFAULT_MEMORY_BYTES = 16 * 2**30
#: Link model of a synthetic cluster: 10 GB/s, 10 microseconds.
DEFAULT_BANDWIDTH = 10e9
DEFAULT_LATENCY = 10e-6
#: Standard errors by which a device's mean log alone / all-at-once speed ratio
#: must be above 0 before a device counts as faster alone (ClusterSpec.alone_factor).
ALONE_SIGNIFICANCE = 3.0


def _number(value, what: str) -> float:
    """``value`` as a float; ValueError naming ``what`` for a string, a bool or
    anything else that is not a number (\"12\" and true are not read as 12 and 1)."""
    if isinstance(value, (str, bytes, bool)):
        raise ValueError(f"{what} must be a number, got {value!r}")
    try:
        return float(value)
    except (TypeError, ValueError) as err:
        raise ValueError(f"{what} must be a number, got {value!r}") from err


def _positive_finite(value, what: str) -> float:
    """``value`` as a finite float > 0; ValueError naming ``what`` otherwise."""
    x = _number(value, what)
    if math.isnan(x) or math.isinf(x) or x <= 0:
        raise ValueError(f"{what} must be a finite number > 0, got {value!r}")
    return x


def _positive_pairs(value, what: str, names: tuple, form: str, below=None) -> tuple:
    """``value`` (a list of 2-item pairs) as a sorted tuple of (float, float),
    both items finite and > 0 (the first also < ``below`` if given), the first
    ones distinct; ``names`` name the two items in errors, ``form`` is the pair
    as the user writes it."""
    try:
        raw = list(value)
    except TypeError as err:
        raise ValueError(f"{what} must be a list of {form} pairs") from err
    points = []
    for i, point in enumerate(raw):
        try:
            first, second = point
        except (TypeError, ValueError) as err:
            raise ValueError(f"{what} point {i} must be {form}, got {point!r}") from err
        first = _positive_finite(first, f"{what} {names[0]} {i}")
        if below is not None and first >= below:
            raise ValueError(f"{what} {names[0]} {i} must be in (0, {below:g}), got {first!r}")
        points.append((first, _positive_finite(second, f"{what} {names[1]} {i}")))
    points.sort()
    if len({p[0] for p in points}) != len(points):
        raise ValueError(f"{what} {names[0]}s must be distinct")
    return tuple(points)


@dataclass(frozen=True)
class DeviceSpec:
    """One device and its measured speed profile.

    Attributes
    ----------
    name : str
        Short unique name (``"cpu0"``, ``"gpu1"``, ``"w3"``).
    device : str
        TensorFlow device string, e.g. ``"/job:worker/task:0/device:CPU:0"``.
    profile : tuple of (size, flops_per_s)
        Throughput measured at several work sizes; ``size`` is the FLOPs of one
        work item (a training step of a layer slice: forward plus backward).
        Sorted by size. Between points the speed is interpolated linearly in
        log(size)-log(speed); outside them it is held constant.
    memory_bytes : int
        Memory available to the device.
    slice_efficiency : tuple of (fraction, efficiency)
        Model-step profiles only: the device's speed on a slice that holds
        ``fraction`` (in (0, 1)) of every split dimension, relative to its
        speed on the whole model at the same batch (narrow convolutions and
        per-slice op costs run below a whole layer's speed). Sorted by
        fraction; empty when not measured (slices run at full speed).
    """

    name: str
    device: str
    profile: tuple
    memory_bytes: int = DEFAULT_MEMORY_BYTES
    slice_efficiency: tuple = ()

    def __post_init__(self):
        for key in ("name", "device"):  # name=5 was taken, and a plan wrote it as '5'
            if not isinstance(getattr(self, key), str):
                raise ValueError(f"device {key} must be a string, got {getattr(self, key)!r}")
        if not self.name:
            raise ValueError("device name must not be empty")
        if not self.device:
            raise ValueError(f"device {self.name!r}: device string must not be empty")
        points = _positive_pairs(self.profile, f"device {self.name!r}: profile",
                                 ("size", "speed"), "[size, flops_per_s]")
        if not points:
            raise ValueError(f"device {self.name!r}: profile must not be empty")
        object.__setattr__(self, "profile", points)
        mem = _positive_finite(self.memory_bytes, f"device {self.name!r}: memory_bytes")
        if mem < 1:  # int() would make it 0: a device that fits nothing
            raise ValueError(f"device {self.name!r}: memory_bytes must be at least 1 byte, "
                             f"got {self.memory_bytes!r}")
        object.__setattr__(self, "memory_bytes", int(mem))
        object.__setattr__(self, "slice_efficiency", self._checked_slices())

    def _checked_slices(self) -> tuple:
        return _positive_pairs(self.slice_efficiency or (),
                               f"device {self.name!r}: slice_efficiency",
                               ("fraction", "efficiency"), "[fraction, efficiency]", below=1)

    def speed_at(self, size) -> np.ndarray | float:
        """FLOP/s for work items of ``size`` FLOPs (scalar or array)."""
        log_sizes = np.log([p[0] for p in self.profile])
        log_speeds = np.log([p[1] for p in self.profile])
        out = np.exp(np.interp(np.log(np.maximum(size, 1e-30)), log_sizes, log_speeds))
        return float(out) if np.ndim(out) == 0 else out

    def to_dict(self) -> dict:
        """JSON-ready dict (``profile`` as a list of ``[size, flops_per_second]`` pairs;
        ``slice_efficiency`` as ``[fraction, efficiency]`` pairs, when measured)."""
        out = {"name": self.name, "device": self.device,
               "profile": [[s, f] for s, f in self.profile],
               "memory_bytes": self.memory_bytes}
        if self.slice_efficiency:
            out["slice_efficiency"] = [[f, e] for f, e in self.slice_efficiency]
        return out


#: The fields of a device in a profile's JSON (:meth:`DeviceSpec.to_dict`).
DEVICE_FIELDS = ("name", "device", "profile", "memory_bytes", "slice_efficiency")


def _refuse_unknown(data: dict, fields: tuple, source: str) -> None:
    """ValueError naming ``source`` for a key of ``data`` not in ``fields``: a misspelt
    optional field (``slice_efficiencies``) would be ignored in silence."""
    unknown = sorted(set(data) - set(fields), key=str)
    if unknown:
        raise ValueError(f"{source}: unknown field {unknown[0]!r}; the fields are "
                         f"{', '.join(fields)}")


def _check_calibration(extra: dict) -> None:
    """ValueError for a hand-edited field of a model-step profile's ``extra`` the cost
    model reads (``work``, ``model``, ``split_seconds``, ``split_overhead_flops``,
    ``sync_jitter``): a list or a number where an object goes was a TypeError or
    AttributeError traceback when planned, a NaN overhead a plan of NaN seconds."""
    for key in ("work", "model", "model_ref"):  # plan --profile takes model_ref as --model
        if extra.get(key) is not None and not isinstance(extra[key], str):
            raise ValueError(f"extra field {key!r} must be a string, got {extra[key]!r}")
    if extra.get("work") not in (None, "layer", "model-step"):  # 'model step' was read as
        raise ValueError(f"extra field 'work' must be 'model-step' (profile --model) or "  # a
                         f"'layer' (the conv3d kernel), got {extra['work']!r}")  # layer profile

    def numbers_in(value, what, keys=None, required=()):
        if not isinstance(value, dict):
            raise ValueError(f"extra field {what} must be an object of numbers, got {value!r}")
        for key in required:
            if key not in value:
                raise ValueError(f"extra field {what} is missing {key!r}")
        for key, x in value.items():
            if (keys is None or key in keys) and x is not None and (
                    isinstance(x, bool) or not isinstance(x, numbers.Real)
                    or not 0 <= x < math.inf):
                raise ValueError(f"extra field {what}[{key!r}] must be a finite number >= 0, "
                                 f"got {x!r}")

    if extra.get("split_overhead_flops"):
        numbers_in(extra["split_overhead_flops"], "'split_overhead_flops'",
                   required=("batch", "model"))
    if extra.get("sync_jitter"):
        numbers_in(extra["sync_jitter"], "'sync_jitter'")
    split = extra.get("split_seconds")
    if split:
        numbers_in(split, "'split_seconds'", keys=("batch", "model", "batch_size", "host_drift"))
        balanced = split.get("balanced")
        if balanced:
            numbers_in(balanced, "'split_seconds.balanced'", keys=("batch", "model"))
            weights = balanced.get("weights")
            if weights is not None and not isinstance(weights, list):
                raise ValueError(f"extra field 'split_seconds.balanced' weights must be a list, "
                                 f"got {weights!r}")
        names = split.get("device_names")
        if names is not None and not (isinstance(names, list)
                                      and all(isinstance(x, str) for x in names)):
            raise ValueError("extra field 'split_seconds' device_names must be a list of the "
                             f"devices' names, got {names!r}")


def _check_addresses(addresses, n: int) -> None:
    """ValueError unless ``addresses`` (a profile's ``extra["addresses"]``) is None or one
    worker address per device: the planner, ``subset`` and ``train --cluster`` ignored
    any other list in silence (a profile with a device deleted by hand), and its plans
    were placed by task number, on other workers than profiled."""
    if addresses is None:
        return
    if not (isinstance(addresses, list) and all(isinstance(a, str) and a for a in addresses)):
        raise ValueError(f"extra field 'addresses' must be a list of worker addresses "
                         f"(host:port), got {addresses!r}")
    if len(addresses) != n:
        raise ValueError(f"extra field 'addresses' lists {len(addresses)} worker addresses "
                         f"for {n} devices: one per device, in the devices' order (remove "
                         "the address of a device removed)")


def per_device(values: Sequence[float], n: int, what: str = "memory",
               noun: str = "device") -> list:
    """``values`` as one float per ``noun`` of ``n``: one value for all (a number or a
    list of one), or ``n``; ValueError naming ``what`` otherwise (a string's characters
    are not values: with_memory("12") was 1 and 2 bytes; a plain number was a TypeError)."""
    if isinstance(values, numbers.Real) and not isinstance(values, bool):
        values = [values]
    # a dict's keys were read as the values ({1: 8e9, 2: 4e9} was 1 and 2 bytes)
    if isinstance(values, (str, bytes, dict)) or not hasattr(values, "__iter__"):
        raise ValueError(f"{what}: expected a number or a list of numbers, got {values!r}")
    values = [_number(v, f"{what}: value {i}") for i, v in enumerate(values)]
    if len(values) == 1:
        return values * n
    if len(values) != n:
        raise ValueError(f"{what}: {len(values)} values for {n} {noun}s; give one for all "
                         f"or one per {noun}")
    return values


@dataclass(frozen=True)
class ClusterSpec:
    """Devices plus the link model shared by all collectives.

    Attributes
    ----------
    devices : tuple of DeviceSpec
    bandwidth : float
        Link bandwidth per device, bytes/s (each device sends and receives at
        this rate at once, as on a switch).
    latency : float
        Per-message latency, seconds.
    """

    devices: tuple
    bandwidth: float = DEFAULT_BANDWIDTH
    latency: float = DEFAULT_LATENCY
    extra: dict = field(default_factory=dict, compare=False)

    def __post_init__(self):
        devices = tuple(self.devices)
        if not devices:
            raise ValueError("a cluster needs at least one device")
        if self.extra is None:
            object.__setattr__(self, "extra", {})
        if not isinstance(self.extra, dict):  # was "'list' object has no attribute 'get'"
            raise ValueError(f"cluster extra must be a dict, got {self.extra!r}")
        for d in devices:
            if not isinstance(d, DeviceSpec):
                raise ValueError(f"cluster devices must be DeviceSpec, got {type(d).__name__}")
        names = [d.name for d in devices]
        if len(set(names)) != len(names):
            raise ValueError("cluster device names must be unique")
        # a worker's device listed twice would be planned as two devices' speed; local
        # emulated devices may share one CPU's string on purpose
        remote = [d.device for d in devices if d.device.startswith("/job:")]
        twice = sorted({r for r in remote if remote.count(r) > 1})
        if twice:
            raise ValueError(f"cluster device {twice[0]} is listed twice; each device of a "
                             "worker can be planned once")
        object.__setattr__(self, "devices", devices)
        object.__setattr__(self, "bandwidth", _positive_finite(self.bandwidth, "bandwidth"))
        latency = _number(self.latency, "latency")
        if math.isnan(latency) or math.isinf(latency) or latency < 0:
            raise ValueError(f"latency must be a finite number >= 0, got {self.latency!r}")
        object.__setattr__(self, "latency", latency)
        for device in self._alone_table():
            self.alone_points(device)  # a hand-edited table is refused here, not when planned
        _check_calibration(self.extra)
        _check_addresses(self.extra.get("addresses"), len(devices))

    def __len__(self) -> int:
        return len(self.devices)

    @property
    def device_strings(self) -> list:
        """TF device string of every device, in cluster order."""
        return [d.device for d in self.devices]

    def _alone_table(self) -> dict:
        """``extra["alone_profile"]`` (``{}`` where the profile has none); ValueError
        when it is not an object."""
        table = (self.extra or {}).get("alone_profile")
        if table is None:
            return {}
        if not isinstance(table, dict):
            raise ValueError("the profile's extra field 'alone_profile' must be an object: "
                             "each device string -> its [size, flops_per_s] pairs")
        return table

    def alone_points(self, device: str) -> tuple:
        """The profile of the device ``device`` (a TF device string) measured with the
        other workers idle (``extra["alone_profile"]``, which ``meshpar profile
        --cluster`` writes next to the all-at-once profile), as sorted ``(size,
        flops_per_s)`` pairs; () where the profile has none for it."""
        table = self._alone_table()
        if device not in table:
            return ()
        return _positive_pairs(table[device], f"alone_profile of {device}", ("size", "speed"),
                               "[size, flops_per_s]")

    def alone_factor(self, device: "DeviceSpec") -> float:
        """How much faster ``device`` ran alone than with every worker at once: the
        geometric mean of its alone / all-at-once speed over the work sizes
        profiled both ways, where that mean is beyond the profile's noise
        (:data:`ALONE_SIGNIFICANCE` standard errors of the log ratios, over at
        least 3 sizes), and at least 1 (a device does not slow down when the
        others idle; a ratio under 1 at every size is the host drifting
        between the two timings); else 1. A single pair of timings moves by a
        fifth on a shared host (0.71-1.33 at one size in stored two-worker
        profiles, whose workers slow each other by 2-3%), and a one-device
        plan priced at its raw alone speed won or lost against the splits on
        that noise."""
        alone = dict(self.alone_points(device.device))
        logs = np.log([alone[size] / speed for size, speed in device.profile if size in alone])
        if logs.size < 3:
            return 1.0
        mean, spread = float(logs.mean()), float(logs.std(ddof=1))
        if mean <= ALONE_SIGNIFICANCE * spread / np.sqrt(logs.size):
            return 1.0
        return float(np.exp(mean))

    def subset(self, devices: Sequence["DeviceSpec"]) -> "ClusterSpec":
        """The cluster of ``devices`` only (some of these, in the order given), for a
        plan that leaves the others idle; the profile's other fields kept.

        Each device keeps its all-at-once speeds, even alone: priced at its
        speeds alone (:meth:`alone_factor`), a one-device plan won or lost
        against the splits on the profile's noise. Re-planning the 84 stored
        two-worker profiles that way changed 3 picks (12 with the raw alone
        points), each to the fast worker alone where the measured best was a
        batch split 12-26% faster. Which device is the one-device candidate
        is chosen by its speed alone (:func:`~meshpar.planning.planners.plan`).

        The profile's timed splits (``split_seconds``) say which devices they ran
        on (``device_names``, as :meth:`reordered`): a cost model refuses to fit
        them to the subset, which did not run them
        (:func:`~meshpar.planning.planners.common.subset_cost` carries their fit).
        The profile's worker ``addresses`` (one per device) are those of ``devices``."""
        devices = tuple(devices)
        foreign = [d for d in devices if d not in self.devices]  # planned with this profile's
        if foreign:  # calibration and addresses as if it were one of its devices
            names = ", ".join(d.name for d in self.devices)
            raise ValueError(f"subset: {getattr(foreign[0], 'name', foreign[0])!r} is not one "
                             f"of this cluster's devices ({names})")
        extra = self._timed_on_these()
        addresses = self.addresses_of(devices)
        if addresses is not None:
            extra["addresses"] = addresses
        return replace(self, devices=devices, extra=extra)

    def addresses_of(self, devices: Sequence["DeviceSpec"]) -> Optional[list]:
        """The profile's worker addresses of ``devices`` (devices of this cluster, by
        their ``device`` names), in their order; None where the profile records no
        address per device or one of ``devices`` is not among them (construction
        refused any other list, :func:`_check_addresses`)."""
        addresses = self.extra.get("addresses")
        if addresses is None:
            return None
        at = {d.device: a for d, a in zip(self.devices, addresses)}
        if not all(d.device in at for d in devices):
            return None
        return [at[d.device] for d in devices]

    def _timed_on_these(self) -> dict:
        """``extra``, its timed splits naming the devices they ran on (these, in
        their order) where the profile does not say."""
        extra = dict(self.extra or {})
        split = extra.get("split_seconds")
        if isinstance(split, dict) and split and "device_names" not in split:
            extra["split_seconds"] = dict(split, device_names=[d.name for d in self.devices])
        return extra

    def reordered(self, order: Sequence[int]) -> "ClusterSpec":
        """The same cluster listing its devices in ``order`` (a permutation of
        ``range(len(self))``): the profile's ``addresses`` (one per device) move
        with them, and its timed splits (``split_seconds``, whose shares went to
        the devices in the order they were listed) say which devices they were
        timed on, in that order (``device_names``), so that the calibration
        still gives each share to the device that ran it."""
        order = [int(i) for i in order]
        if sorted(order) != list(range(len(self.devices))):
            raise ValueError(f"order must be a permutation of 0..{len(self.devices) - 1}, "
                             f"got {order!r}")
        extra = self._timed_on_these()
        addresses = extra.get("addresses")
        if isinstance(addresses, list) and len(addresses) == len(order):
            extra["addresses"] = [addresses[i] for i in order]
        return replace(self, devices=tuple(self.devices[i] for i in order), extra=extra)

    def speeds_at(self, size: float) -> np.ndarray:
        """Each device's FLOP/s at work items of ``size`` FLOPs, shape [n]."""
        return np.array([d.speed_at(size) for d in self.devices], dtype=float)

    @classmethod
    def from_speeds(cls, speeds: Sequence[float], reference_flops: float = REFERENCE_FLOPS,
                    memory_bytes: float = DEFAULT_MEMORY_BYTES,
                    bandwidth: float = DEFAULT_BANDWIDTH,
                    latency: float = DEFAULT_LATENCY) -> "ClusterSpec":
        """A synthetic cluster: device i runs at ``speeds[i] * reference_flops``
        at every size (a constant profile). Device strings are
        ``/job:worker/task:i/device:CPU:0``.
        """
        try:
            # "12" is not the speeds 1 and 2; a dict's keys or a set's order are no listing
            if isinstance(speeds, (str, bytes, dict, set, frozenset)):
                raise TypeError(speeds)
            values = list(speeds)
        except TypeError as err:
            raise ValueError(f"speeds must be a list of numbers, got {speeds!r}") from err
        if not values:
            raise ValueError("speeds must not be empty")
        # True was 1 FLOP/s, "1e11" a TypeError from multiplying a string
        reference_flops = _positive_finite(reference_flops, "reference_flops")
        devices = []
        for i, s in enumerate(values):
            speed = _positive_finite(s, f"speed {i}")
            devices.append(DeviceSpec(
                name=f"w{i}", device=f"/job:worker/task:{i}/device:CPU:0",
                profile=((1.0, speed * reference_flops),), memory_bytes=memory_bytes))
        return cls(tuple(devices), bandwidth=bandwidth, latency=latency)

    def with_memory(self, memory_bytes: Sequence[float]) -> "ClusterSpec":
        """This cluster with each device's memory replaced: ``memory_bytes`` is one
        value for every device or one per device in cluster order (a budget the
        planner must respect, e.g. to leave room for other jobs, or emulated)."""
        values = per_device(memory_bytes, len(self.devices))
        devices = tuple(replace(d, memory_bytes=m) for d, m in zip(self.devices, values))
        return replace(self, devices=devices)

    def to_dict(self) -> dict:
        """JSON-ready dict, the format :meth:`from_dict` and :meth:`load` read."""
        out = {"devices": [d.to_dict() for d in self.devices],
               "bandwidth": self.bandwidth, "latency": self.latency}
        if self.extra:
            out["extra"] = dict(self.extra)
        return out

    @classmethod
    def from_dict(cls, data, source: str = "cluster") -> "ClusterSpec":
        """Build from a dict; errors name ``source`` and the missing/bad field."""
        if not isinstance(data, dict):
            raise ValueError(f"{source}: expected a JSON object, got {type(data).__name__}")
        for key in ("devices", "bandwidth", "latency"):
            if key not in data:
                raise ValueError(f"{source}: missing field {key!r}")
        _refuse_unknown(data, ("devices", "bandwidth", "latency", "extra"), source)
        if not isinstance(data.get("extra") or {}, dict):
            raise ValueError(f"{source}: field 'extra' must be an object")
        if not isinstance(data["devices"], list):
            raise ValueError(f"{source}: field 'devices' must be a list")
        devices = []
        for i, row in enumerate(data["devices"]):
            if not isinstance(row, dict):
                raise ValueError(f"{source}: devices[{i}] must be an object")
            for key in ("name", "device", "profile", "memory_bytes"):
                if key not in row:
                    raise ValueError(f"{source}: devices[{i}] is missing field {key!r}")
            _refuse_unknown(row, DEVICE_FIELDS, f"{source}: devices[{i}]")
            for key in ("name", "device"):
                if not isinstance(row[key], str):
                    raise ValueError(f"{source}: devices[{i}]: field {key!r} must be a string, "
                                     f"got {row[key]!r}")
            try:
                devices.append(DeviceSpec(name=row["name"], device=row["device"],
                                          profile=row["profile"],
                                          memory_bytes=row["memory_bytes"],
                                          slice_efficiency=row.get("slice_efficiency") or ()))
            except ValueError as err:
                raise ValueError(f"{source}: devices[{i}]: {err}") from err
        try:
            return cls(tuple(devices), bandwidth=data["bandwidth"], latency=data["latency"],
                       extra=dict(data.get("extra") or {}))
        except ValueError as err:
            raise ValueError(f"{source}: {err}") from err

    def save(self, path) -> None:
        """Write the JSON file atomically (an existing file is never left half-written)."""
        save_json_atomic(path, self.to_dict())

    @classmethod
    def load(cls, path) -> "ClusterSpec":
        """Read a device profile (as written by :meth:`save` or ``meshpar profile``).

        FileNotFoundError if it is missing; ValueError naming the file for bad JSON
        or a bad field, and for a TF cluster file (worker addresses) given instead.
        """
        path = os.fspath(path)
        data = load_json(path, "device profile")
        if isinstance(data, dict) and "devices" not in data and (
                "cluster" in data or all(isinstance(v, list) and all(isinstance(a, str) for a in v)
                                         for v in data.values())):
            raise ValueError(f"{path} is a TF cluster file (worker addresses), not a device "
                             f"profile: `meshpar profile --cluster {path} --out profile.json` "
                             "writes the profile of its workers")
        if isinstance(data, dict) and all(k in data for k in ("method", "mesh_shape", "layout")):
            raise ValueError(f"{path} is a plan (`meshpar plan --out`), not a device profile: "
                             "`meshpar profile --out profile.json` writes one")
        return cls.from_dict(data, source=f"device profile {path}")
