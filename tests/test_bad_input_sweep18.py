"""Bad-input sweep 18: the Python API a notebook calls directly (the re-balancing
options and speed monitor, the cost model, clusters, plans, the mesh, the cluster
client, profilers, recipes, run files), each argument either taken as meant or refused
naming it (the local workers' own are in their cluster's test file; the data's in
test_bad_input_sweep18_data.py)."""
import math
import re

import numpy as np
import pytest
from test_bad_input_sweep17 import _run_file  # a run file with some fields edited


def _match(words: str) -> str:
    return re.escape(words)


# ------------------------------------------------------------- re-balancing options
@pytest.mark.parametrize("kwargs, error, words", [
    (dict(profile="profile.json"), TypeError,
     "rebalance profile must be a ClusterSpec (the workers' measured profile), got "
     "'profile.json'; for a profile file, ClusterSpec.load(path)"),
    (dict(profile={"devices": []}), TypeError, "rebalance profile must be a ClusterSpec"),
    (dict(poll_seconds=math.inf), ValueError, "poll_seconds must be finite and > 0, got inf"),
])
def test_rebalance_options_name_a_wrong_profile_or_poll(kwargs, error, words):
    """A profile given as its file's path was taken and failed when the run started with
    "'str' object has no attribute 'devices'"; an infinite poll_seconds reached
    thread.join's 'timeout value is too large'."""
    from meshpar.training.rebalance import RebalanceOptions

    with pytest.raises(error, match=_match(words)):
        RebalanceOptions(**kwargs)


def test_rebalance_options_still_take_a_profile():
    from meshpar.planning.cluster import ClusterSpec
    from meshpar.training.rebalance import RebalanceOptions

    profile = ClusterSpec.from_speeds([1.0, 0.5])
    assert RebalanceOptions(profile=profile, poll_seconds=np.float32(0.5)).profile is profile


# ------------------------------------------------------- the speed monitor and trigger
def _sample(step, busy):
    return False


@pytest.mark.parametrize("kwargs, error, words", [
    (dict(every=2.5), TypeError, "re-balancing samples every N steps: N must be an integer"),
    (dict(every="3"), TypeError, "re-balancing samples every N steps: N must be an integer"),
    (dict(every=0), ValueError, "N must be an integer >= 1, got 0"),
    (dict(trace="no"), TypeError, "SpeedMonitor trace must be True or False"),
    (dict(warmup=-1), ValueError, "SpeedMonitor warmup must be an integer >= 0"),
    (dict(warmup=1.5), TypeError, "SpeedMonitor warmup must be an integer >= 0"),
    (dict(burst=0), ValueError, "SpeedMonitor burst must be an integer >= 1"),
    (dict(budget="0.1"), TypeError, "the measuring budget must be a number"),
    (dict(budget=math.nan), ValueError, "the measuring budget must be finite"),
    (dict(on_sample=None), TypeError, "SpeedMonitor on_sample (and on_step, if given) must "
                                      "be callable"),
])
def test_the_speed_monitor_names_a_wrong_argument(kwargs, error, words):
    """every=2.5 sampled one step in 2 (int()), trace="no" traced (bool()), a negative
    warmup and a burst of 0 were taken, '3' was Python's '<' between str and int, and
    on_sample=None failed at the first sample."""
    from meshpar.training.live_speeds import SpeedMonitor

    with pytest.raises(error, match=_match(words)):
        SpeedMonitor(**{"every": 3, "on_sample": _sample, **kwargs})


def test_the_speed_monitor_takes_numpy_values():
    from meshpar.training.live_speeds import SpeedMonitor

    monitor = SpeedMonitor(np.int64(5), _sample, warmup=np.int32(0), trace=np.bool_(False),
                           burst=np.int64(2), budget=np.float64(0.2))
    assert (monitor.every, monitor.warmup, monitor.trace, monitor.burst, monitor.budget) == (
        5, 0, False, 2, 0.2)
    assert all(type(v) is t for v, t in ((monitor.every, int), (monitor.trace, bool),
                                         (monitor.burst, int), (monitor.budget, float)))


@pytest.mark.parametrize("kwargs, error, words", [
    (dict(threshold=math.inf), ValueError, "step-time trigger: threshold must be finite"),
    (dict(threshold="0.2"), TypeError, "step-time trigger: threshold must be a number"),
    (dict(z=math.inf), ValueError, "step-time trigger: z must be finite"),
    (dict(z=-1), ValueError, "step-time trigger: z must be >= 0"),
    (dict(window=2.5), TypeError, "step-time trigger: window must be an integer >= 1"),
    (dict(confirm=True), TypeError, "step-time trigger: confirm must be an integer >= 1"),
    (dict(history="60"), TypeError, "step-time trigger: history must be an integer >= 1"),
    (dict(window=20), ValueError, "need 1 <= window <= settle <= history"),
])
def test_the_step_time_trigger_names_a_wrong_argument(kwargs, error, words):
    """An infinite threshold or z made a band no shift leaves (it never fired), window 2.5
    was cut to 2, confirm=True read as 1, and strings met Python's '>' or '<'."""
    from meshpar.training.step_trigger import StepTimeTrigger

    with pytest.raises(error, match=_match(words)):
        StepTimeTrigger(**kwargs)


def test_the_step_time_trigger_still_fires_with_numpy_values():
    from meshpar.training.step_trigger import StepTimeTrigger

    trigger = StepTimeTrigger(threshold=np.float32(0.25), window=np.int64(15))
    fired = [i for i, s in enumerate([1.0] * 30 + [2.0] * 30) if trigger.observe(s)]
    assert fired == [40] and type(trigger.window) is int


# ------------------------------------------------------------ the cost model, clusters
@pytest.fixture(scope="module")
def tiny():
    from meshpar.models import describe_model

    return describe_model("resattnet3d-tiny")


@pytest.mark.parametrize("call, error, words", [
    (lambda d, c: ("resattnet3d-tiny", c, 4), TypeError,
     "model must be a ModelDescription, got 'resattnet3d-tiny'; for a model name, pass "
     "meshpar.models.describe_model('resattnet3d-tiny')"),
    (lambda d, c: (d, [0.9, 0.3], 4), TypeError,
     "cluster must be a ClusterSpec, got [0.9, 0.3]; for relative speeds, "
     "ClusterSpec.from_speeds(them)"),
    (lambda d, c: (d, c, 4, 2.5), TypeError, "optimizer_slots must be an integer >= 0"),
    (lambda d, c: (d, c, 4, "2"), TypeError, "optimizer_slots must be an integer >= 0"),
    (lambda d, c: (d, c, 4, 2, "measured"), TypeError, "memory_terms must be a MemoryTerms"),
])
def test_the_cost_model_names_a_wrong_argument(tiny, call, error, words):
    """A model name or a list of speeds ended in "'str' object has no attribute
    'layers'" / "'list' object has no attribute 'devices'" (so did every planner's own
    function, plan_even and the rest); optimizer_slots 2.5 was cut to 2 and "2" read."""
    from meshpar.planning.cluster import ClusterSpec
    from meshpar.planning.cost_model import CostModel

    with pytest.raises(error, match=_match(words)):
        CostModel(*call(tiny, ClusterSpec.from_speeds([0.9, 0.3])))


def test_a_planners_own_function_names_a_model_name(tiny):
    from meshpar.planning.cluster import ClusterSpec
    from meshpar.planning.planners import plan_even

    with pytest.raises(TypeError, match=_match("describe_model('resattnet3d-tiny')")):
        plan_even("resattnet3d-tiny", ClusterSpec.from_speeds([1.0, 1.0]), 4)


def test_the_cost_model_still_takes_numpy_integers(tiny):
    from meshpar.planning.cluster import ClusterSpec
    from meshpar.planning.cost_model import CostModel

    cost = CostModel(tiny, ClusterSpec.from_speeds([1.0]), np.int64(4), np.int64(0))
    assert (cost.batch, cost.optimizer_slots) == (4, 0) and type(cost.optimizer_slots) is int


@pytest.mark.parametrize("make, words", [
    (lambda C, D: D(name=5, device="/cpu:0", profile=[(1, 1)]), "device name must be a string"),
    (lambda C, D: D(name="a", device=0, profile=[(1, 1)]), "device device must be a string"),
    (lambda C, D: C((D("a", "/cpu:0", [(1, 1)]),), extra=[1]), "cluster extra must be a dict"),
    (lambda C, D: C.from_speeds([1.0], reference_flops=True),
     "reference_flops must be a number, got True"),
    (lambda C, D: C.from_speeds([1.0], reference_flops="1e11"),
     "reference_flops must be a number, got '1e11'"),
    (lambda C, D: C.from_speeds([1.0], reference_flops=-1e11),
     "reference_flops must be a finite number > 0"),
])
def test_a_cluster_names_a_wrong_field(make, words):
    """DeviceSpec(name=5) was taken (a profile's from_dict refused it, the class did
    not), extra=[1] was "'list' object has no attribute 'get'", reference_flops=True a
    cluster of 1 FLOP/s in silence, '1e11' a TypeError from multiplying a string and
    -1e11 named the devices' profile speed rather than the argument."""
    from meshpar.planning.cluster import ClusterSpec, DeviceSpec

    with pytest.raises(ValueError, match=_match(words)):
        make(ClusterSpec, DeviceSpec)


def test_a_cluster_still_takes_numpy_numbers_and_no_extra():
    from meshpar.planning.cluster import ClusterSpec, DeviceSpec

    cluster = ClusterSpec.from_speeds(np.array([0.5, 1.0]), reference_flops=np.float32(1e9))
    assert [p for d in cluster.devices for _, p in d.profile] == pytest.approx([5e8, 1e9])
    assert ClusterSpec((DeviceSpec("a", "/cpu:0", [(1, 1)]),), extra=None).extra == {}


@pytest.mark.parametrize("addresses, words", [
    (["a:1", "b:2", "c:3"], "extra field 'addresses' lists 3 worker addresses for 2 devices"),
    (["a:1"], "extra field 'addresses' lists 1 worker addresses for 2 devices"),
    ("a:1,b:2", "extra field 'addresses' must be a list of worker addresses"),
    (["a:1", 2], "extra field 'addresses' must be a list of worker addresses"),
])
def test_a_profile_whose_addresses_are_not_one_per_device_is_refused(addresses, words):
    """A profile with a device deleted by hand (its address left) lost all its addresses
    in silence: plans recorded no worker_addresses and train --cluster placed them by
    task number, on other workers than profiled."""
    from meshpar.planning.cluster import ClusterSpec

    data = dict(ClusterSpec.from_speeds([1.0, 0.5]).to_dict(), extra={"addresses": addresses})
    with pytest.raises(ValueError, match=_match(words)):
        ClusterSpec.from_dict(data)


def test_a_profile_with_an_address_per_device_still_places_its_plans():
    from meshpar.models import describe_model
    from meshpar.planning.cluster import ClusterSpec
    from meshpar.planning.planners import plan

    data = dict(ClusterSpec.from_speeds([1.0, 0.5]).to_dict(),
                extra={"addresses": ["b:2", "a:1"]})
    found = plan(describe_model("resattnet3d-tiny"), ClusterSpec.from_dict(data), 4,
                 method="proportional")
    where = {"/job:worker/task:0/device:CPU:0": "b:2", "/job:worker/task:1/device:CPU:0": "a:1"}
    assert found.extra["worker_addresses"] == [where[d] for d in found.devices]


# ------------------------------------------------------------------- hand-edited plans
def _planned(**kwargs):
    from meshpar.models import describe_model
    from meshpar.planning.cluster import ClusterSpec
    from meshpar.planning.planners import plan

    return plan(describe_model("resattnet3d-tiny"), ClusterSpec.from_speeds([0.9, 0.3]), 4,
                method="proportional", **kwargs).to_dict()


@pytest.mark.parametrize("shapes, deleted, words", [
    ([(1, 2)], "split_weights", "split_sizes of 'stem_filters' [3, 1] are not what an even "
                                "split gives (it has no weights) ([2, 2])"),
    ([(2, 1)], "split_weights", "split_sizes of 'batch' [3, 1] are not what an even split "
                                "gives (it has no weights) ([2, 2])"),
])
def test_a_plan_whose_weights_were_deleted_is_refused(shapes, deleted, words):
    """A plan file with its split_weights deleted (or emptied) kept its uneven
    split_sizes, and MeshSpec.from_plan / train --plan cut every dimension evenly in
    silence: the sizes were checked against the weights only where there were some."""
    from meshpar.planning.plan import Plan

    data = _planned(shapes=shapes)
    del data[deleted]
    with pytest.raises(ValueError, match=_match(words)):
        Plan.from_dict(data)
    with pytest.raises(ValueError, match=_match(words)):
        Plan.from_dict(dict(data, split_weights={}))


def test_a_plan_without_weights_that_splits_evenly_is_still_read():
    from meshpar.planning.plan import Plan

    data = _planned(shapes=[(2, 1)])
    data = dict(data, split_weights={}, split_sizes={"batch": [2, 2]})
    assert Plan.from_dict(data).split_sizes == {"batch": [2, 2]}


# ------------------------------------------------------------- the mesh implementation
@pytest.mark.parametrize("layout", [{"f": "model"}, ["fm"], [("f", "model", "x")], [(1, 2)]])
def test_a_layout_that_is_no_pairs_is_named(layout):
    """A dict layout failed in Mesh-TF with 'not enough values to unpack (expected 2, got
    1)', and a list holding the string 'fm' was read as the rule f:m in silence."""
    from meshpar import HeterogeneousMeshImpl

    with pytest.raises(TypeError, match="layout must be a layout string such as"):
        HeterogeneousMeshImpl("model:2", layout, ["", ""])


@pytest.mark.parametrize("layout", [[["f", "model"]], [("f", "model")], {("f", "model")},
                                    "f:model"])
def test_layout_pairs_as_json_lists_them_are_read(layout):
    """A plan file's layout (JSON: a list of [dimension, axis] lists) was Mesh-TF's
    'unhashable type: list'; it now lays out as the pairs it lists."""
    import mesh_tensorflow as mtf

    from meshpar import HeterogeneousMeshImpl

    impl = HeterogeneousMeshImpl("model:2", layout, ["", ""], split_weights={"model": [3, 1]})
    assert impl.tensor_dimension_to_mesh_axis(mtf.Dimension("f", 8)) == 0
    assert impl.split_sizes(mtf.Dimension("f", 8)) == [6, 2]


# ----------------------------------------------------------------------------- profiles
@pytest.mark.parametrize("kwargs, error, words", [
    (dict(repeats=2.5), TypeError, "repeats must be an integer >= 1, got 2.5"),
    (dict(repeats="3"), TypeError, "repeats must be an integer >= 1, got '3'"),
    (dict(sizes=[(1, 8, 8)]), ValueError, "profile sizes[0] must be (batch, spatial, c_in, "
                                          "c_out), got (1, 8, 8)"),
    (dict(sizes=[(1, 8, 8, 0)]), ValueError, "profile sizes[0][3] must be an integer >= 1"),
    (dict(sizes=[(1, 8.5, 8, 8)]), TypeError, "profile sizes[0][1] must be an integer >= 1"),
    (dict(sizes="1,8,8,8"), TypeError, "profile sizes must be (batch, spatial, c_in, c_out) "
                                       "tuples"),
    (dict(sizes=[]), ValueError, "profile sizes must not be empty"),
])
@pytest.mark.parametrize("where", ["local", "cluster"])
def test_the_profilers_name_wrong_sizes_and_repeats_before_timing(kwargs, error, words, where,
                                                                  monkeypatch):
    """repeats=2.5 ran the first size's kernel and then failed in range(), a size of three
    numbers in an unpacking, a size of 0 in a zero-FLOP profile point, 8.5 was cut to 8;
    nothing is timed (and no worker asked) before these are refused."""
    import meshpar.runtime.client as client
    from meshpar.runtime import profiling

    def never(*args, **kwargs):
        raise AssertionError("asked a worker before checking the arguments")

    monkeypatch.setattr(client, "ClusterClient", never)
    call = (profiling.profile_local_devices if where == "local" else
            lambda **kw: profiling.profile_cluster_workers(["127.0.0.1:1"], **kw))
    with pytest.raises(error, match=_match(words)):
        call(**kwargs)


def test_from_plan_refuses_devices_given_as_one_string():
    """HeterogeneousMeshImpl.from_plan(plan, devices="ab") listed the string's letters
    as the plan's two devices ('a' and 'b'), where the constructor refuses a string."""
    from meshpar import HeterogeneousMeshImpl
    from meshpar.planning.plan import Plan

    plan = Plan.from_dict(_planned(shapes=[(1, 2)]))
    with pytest.raises(ValueError, match="devices must be a sequence of device strings"):
        HeterogeneousMeshImpl.from_plan(plan, devices="ab")
    assert HeterogeneousMeshImpl.from_plan(plan, devices=("", "")).devices == ["", ""]


@pytest.mark.parametrize("memory", [[1e6], [1e6, 1e6, 1e6], [-1.0, 1e6], [math.nan, 1e6]])
def test_a_plan_whose_memory_is_not_one_count_per_device_is_refused(memory):
    """A hand-edited memory_per_device of another length, a negative or a NaN count was
    taken; bench memory zips the counts with the plan's devices (a short list left
    devices out in silence). An empty list (none predicted) is still read."""
    from meshpar.planning.plan import Plan

    with pytest.raises(ValueError, match="memory_per_device must be one finite number of "
                                         "bytes >= 0 per device"):
        Plan.from_dict(dict(_planned(shapes=[(2, 1)]), memory_per_device=memory))
    assert Plan.from_dict(dict(_planned(shapes=[(2, 1)]), memory_per_device=[])).feasible


# --------------------------------------------------------------------------- the recipe
@pytest.mark.parametrize("params, words", [
    (dict(decay_steps=100), "params['decay_steps'] goes with lr_schedule='step'; "
                            "lr_schedule='constant' would ignore it"),
    (dict(lr_schedule="cosine", total_steps=100, decay_rate=0.5),
     "params['decay_rate'] goes with lr_schedule='step'; lr_schedule='cosine'"),
    (dict(lr_schedule="step", decay_steps=10, min_lr=1e-5),
     "params['min_lr'] goes with lr_schedule='cosine'; lr_schedule='step'"),
    (dict(lr_schedule=lambda step: 0.1, warmup_steps=5),
     "params['warmup_steps'] is a setting of the named schedules; a callable lr_schedule"),
])
def test_a_schedule_setting_the_schedule_ignores_is_refused(params, words):
    """make_estimator(params={'decay_steps': 100}) trained at a constant rate in silence
    (the constant schedule is the default), as min_lr under the step schedule and a
    warm-up under a schedule of one's own did; train's flags were refused so, the API's
    params were not."""
    from meshpar.training.recipe import Recipe

    with pytest.raises(ValueError, match=_match(words)):
        Recipe.from_params(params)


def test_schedule_settings_at_their_defaults_still_pass():
    """What meshpar train passes for every schedule (decay_rate 0.1, min_lr 0, the run's
    steps as total_steps) changes nothing and is taken, as is each schedule's own."""
    from meshpar.training.recipe import Recipe

    for schedule in ("constant", "cosine", "step"):
        own = {"step": dict(decay_steps=5, decay_rate=0.5), "cosine": dict(min_lr=1e-4)}
        Recipe.from_params({"lr_schedule": schedule, "warmup_steps": 2, "total_steps": 20,
                            "decay_rate": 0.1, "min_lr": 0.0, **own.get(schedule, {})})
    Recipe.from_params(dict(lr_schedule=lambda step: 0.1, decay_rate=0.1, warmup_steps=0))


# ------------------------------------------------------------------ the cluster client
@pytest.mark.parametrize("kwargs, words", [
    (dict(addresses="127.0.0.1:2222"), "addresses must be a list of worker addresses "
                                       "(host:port), got '127.0.0.1:2222'"),
    (dict(addresses=["127.0.0.1:2222", 2223]), "addresses must be a list of worker "
                                                "addresses"),
    (dict(addresses=["127.0.0.1:2222"], timeout_s="30"), "worker timeout must be > 0 "
                                                          "seconds"),
])
def test_the_cluster_client_names_a_wrong_argument(kwargs, words):
    """One address string was a cluster of its characters (workers '1', '2', '7', '.',
    ...), which check=False took and started a server for; a port number a TF error;
    timeout_s '30' Python's '<=' between float and str."""
    from meshpar.runtime.client import ClusterClient

    with pytest.raises(ValueError, match=_match(words)):
        ClusterClient(**{"check": False, **kwargs})


def test_the_cluster_client_check_is_a_switch():
    from meshpar.runtime.client import ClusterClient

    with pytest.raises(TypeError, match="check must be True or False, got 'no'"):
        ClusterClient(["127.0.0.1:2222"], check="no")


@pytest.mark.parametrize("other", [lambda C, D: D("z", "/job:worker/task:9/device:CPU:0",
                                                  [(1, 1e11)]),
                                   lambda C, D: "w0"])
def test_a_subset_of_devices_the_cluster_lacks_is_refused(other):
    """ClusterSpec.subset([a device of another cluster]) gave a cluster of it with this
    profile's calibration and extra fields (as if profiled here), and subset(['w0'])
    (a name) 'cluster devices must be DeviceSpec'."""
    from meshpar.planning.cluster import ClusterSpec, DeviceSpec

    cluster = ClusterSpec.from_speeds([1.0, 0.5])
    with pytest.raises(ValueError, match="is not one of this cluster's devices \\(w0, w1\\)"):
        cluster.subset([cluster.devices[1], other(ClusterSpec, DeviceSpec)])
    assert cluster.subset([cluster.devices[1]]).devices == (cluster.devices[1],)


# ------------------------------------------------------------------ hand-edited run files


@pytest.mark.parametrize("fields, shown", [
    (dict(seed="5"), "seed='5'"),
    (dict(val_fraction="0.25"), "val_fraction='0.25'"),
    (dict(optimizer=None), "optimizer=None"),
    (dict(split={"folds": "4", "fold": 1, "fold_seed": 0, "test_fraction": None}),
     "split.folds='4'"),
    (dict(split=[4, 1]), "split=[4, 1]"),
])
def test_a_run_file_with_a_setting_of_another_type_is_named(tmp_path, capsys, fields, shown):
    """A run file whose seed was edited to "5" was refused as 'holds a run with another
    seed (seed='5'); resume it with --seed 5', which --seed 5 did not resume (the int is
    not the string): the advice went round in a circle. A recorded setting of another
    type than train writes is now named as malformed."""
    from meshpar.cli import main
    from meshpar.training.run import load_run_info

    model_dir = _run_file(tmp_path / "m", **fields)
    with pytest.raises(ValueError, match=_match(f"meshpar_run.json: malformed {shown} (as "
                                                "meshpar train writes it")):
        load_run_info(model_dir)
    argv = ["train", "--synthetic", "--model", "resattnet3d-tiny", "--batch", "2", "--steps",
            "2", "--no-progress", "--model-dir", model_dir, "--seed", "5"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"malformed {shown}" in err[0], err


def test_a_run_file_as_train_writes_it_is_still_read(tmp_path):
    from meshpar.training.run import load_run_info

    model_dir = _run_file(tmp_path / "m", seed=5, split={"folds": 4, "fold": 1,
                                                         "fold_seed": 3, "test_fraction": None})
    assert load_run_info(model_dir)["seed"] == 5
    assert load_run_info(_run_file(tmp_path / "n", val_fraction=0,
                                   split={"test_fraction": 0.2}))["val_fraction"] == 0


def test_with_memory_refuses_a_dict():
    """ClusterSpec.with_memory({1: 8e9, 2: 4e9}) read the dict's keys as the values: devices
    of 1 and 2 bytes, every plan infeasible (or a device per key left out of memory)."""
    from meshpar.planning.cluster import ClusterSpec

    cluster = ClusterSpec.from_speeds([1.0, 0.5])
    with pytest.raises(ValueError, match="memory: expected a number or a list of numbers"):
        cluster.with_memory({1: 8e9, 2: 4e9})
    assert [d.memory_bytes for d in cluster.with_memory(np.array([8e9, 4e9])).devices] == [
        8_000_000_000, 4_000_000_000]


@pytest.mark.parametrize("speeds", [{0.9: "a", 0.3: "b"}, {0.9, 0.3}])
def test_from_speeds_refuses_a_dict_or_a_set(speeds):
    """ClusterSpec.from_speeds of a dict took its keys and of a set its hash order as the
    devices' listing (task 0, 1, ...), in silence."""
    from meshpar.planning.cluster import ClusterSpec

    with pytest.raises(ValueError, match="speeds must be a list of numbers"):
        ClusterSpec.from_speeds(speeds)


def test_a_plan_of_numpy_numbers_is_json():
    """Plan(batch=np.int64(4)) kept the numpy integer, and json.dumps(plan.to_dict())
    failed with 'Object of type int64 is not JSON serializable'."""
    import json

    from meshpar.planning.plan import Plan

    plan = Plan("even", "resattnet3d-tiny", np.int64(4), (("batch", np.int64(2)),),
                (("batch", "batch"),), ("", ""))
    assert json.loads(json.dumps(plan.to_dict()))["batch"] == 4 and type(plan.batch) is int
