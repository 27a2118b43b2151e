"""The rows of tests/test_bad_input.py: one ``Case`` per bad input, and the library
calls its ``api`` rows make. The test module says how each kind of row is run."""
import math
from pathlib import Path
from typing import Callable, NamedTuple, Sequence, Union

SHAPE = (16, 16, 16)            # resattnet3d-tiny's input grid
TRAIN = ["--model", "resattnet3d-tiny", "--batch", "2", "--val-fraction", "0", "--no-progress"]
SYNTH = ["train", "--synthetic", "--steps", "1", "--no-progress"]


class Case(NamedTuple):
    id: str
    kind: str                    # "cli", "subprocess" or "api"
    call: Union[Sequence[str], Callable]
    expect: str                  # fragment of the one error line / the exception message
    code: int = 2                # exit code of a cli / subprocess case
    error: type = ValueError     # exception type of an api case


# ------------------------------------------------------------------- api calls
def _impl(shape="model:2", layout="f:model", n=None, **kwargs):
    from meshpar.core.mesh_impl import HeterogeneousMeshImpl

    n = n if n is not None else math.prod(int(p.split(":")[1]) for p in shape.split(";"))
    return lambda d: HeterogeneousMeshImpl(shape, layout, [""] * n, **kwargs)


def _impl_on(devices, shape="model:2"):
    """``HeterogeneousMeshImpl`` on ``shape`` with ``devices`` as given (not a list)."""
    from meshpar.core.mesh_impl import HeterogeneousMeshImpl

    return lambda d: HeterogeneousMeshImpl(shape, "f:model", devices)


def _slice_of_pnum(call, pnum):
    """``call`` ("slice_shape" or "slice_begin") of f:13 on model:3 for processor ``pnum``."""
    def run(d):
        import mesh_tensorflow as mtf

        impl = _impl("model:3")(d)
        return getattr(impl, call)([mtf.Dimension("f", 13)], pnum)
    return run


def _split_small_dim(d):
    import mesh_tensorflow as mtf

    impl = _impl("model:3", split_weights={"model": [3, 2, 1]})(d)
    return impl.split_sizes(mtf.Dimension("f", 2))


def _lower(layout, dims):
    """Lower ``reduce_sum(ones(dims))`` on ``model:2`` with ``layout``."""
    def call(d):
        import meshpar  # noqa: F401
        import mesh_tensorflow as mtf
        import tensorflow.compat.v1 as tf

        from meshpar.core.mesh_impl import HeterogeneousMeshImpl

        with tf.Graph().as_default():
            graph = mtf.Graph()
            mesh = mtf.Mesh(graph, "mesh")
            x = mtf.ones(mesh, mtf.Shape([mtf.Dimension(n, s) for n, s in dims]))
            y = mtf.reduce_sum(x)
            impl = HeterogeneousMeshImpl("model:2", layout, ["", ""],
                                         split_weights={"model": [3, 1]})
            mtf.Lowering(graph, {mesh: impl}).export_to_tf_tensor(y)
    return call


def _plan(d):
    from meshpar.planning.plan import Plan

    return Plan.load(Path(d) / "plan.json")


def _plan_of(**fields):
    """A ``Plan`` built directly from ``fields`` (the rest: a one-device plan)."""
    from meshpar.planning.plan import Plan

    base = dict(method="even", model="vgg-cifar-small", batch=4, mesh_shape=(("batch", 1),),
                layout=(), devices=("a",))
    return Plan(**dict(base, **fields))


def _estimator_of_plan(d):
    """``make_estimator`` on plan.json's worker tasks, in a process that has none."""
    from meshpar.training.estimator import make_estimator

    return make_estimator("vgg-cifar-small", str(Path(d) / "est"), plan=_plan(d))


def _make_estimator(d, **kwargs):
    """``make_estimator`` of resattnet3d-tiny on one device, ``kwargs`` added."""
    from meshpar.training.estimator import make_estimator

    return make_estimator("resattnet3d-tiny", **dict(dict(model_dir=str(Path(d) / "est-args")),
                                                    **kwargs))


def _impl_from_plan(d, devices):
    from meshpar.core.mesh_impl import HeterogeneousMeshImpl

    return HeterogeneousMeshImpl.from_plan(_plan(d), devices)


def _impl_from_plan_of(plan):
    from meshpar.core.mesh_impl import HeterogeneousMeshImpl

    return HeterogeneousMeshImpl.from_plan(plan, ["a"])


def _cluster_load(name):
    def call(d):
        from meshpar.planning.cluster import ClusterSpec

        return ClusterSpec.load(Path(d) / name)
    return call


def _from_speeds(speeds, **kwargs):
    from meshpar.planning.cluster import ClusterSpec

    return ClusterSpec.from_speeds(speeds, **kwargs)


def _cluster_from(**fields):
    """``ClusterSpec.from_dict`` of a one-device profile with ``fields`` replaced."""
    from meshpar.planning.cluster import ClusterSpec

    data = dict(ClusterSpec.from_speeds([1.0]).to_dict(), **fields)
    return ClusterSpec.from_dict(data)


def _write_dataset(**kwargs):
    """``write_dataset`` of two 8^3 subjects into a new directory, ``kwargs`` replaced."""
    def call(d):
        from meshpar.data.phantoms import write_dataset

        args = dict(out_dir=Path(d) / f"wd-{sorted(kwargs)[0]}", n=2, shape=(8, 8, 8))
        return write_dataset(**dict(args, **kwargs))
    return call


def _tf_dataset(**kwargs):
    """``make_tf_dataset`` of the fixture's one-class 16^3 dataset, ``kwargs`` replaced."""
    def call(d):
        from meshpar.data.nifti import make_tf_dataset

        return make_tf_dataset(**dict(dict(directory=Path(d) / "one-class", shape=SHAPE,
                                           batch_size=2), **kwargs))
    return call


def _ga_plan(**kwargs):
    """``planners.plan`` of vgg-cifar-small on speeds 1, 0.5 (batch 4) by the GA."""
    from meshpar.models import describe_model
    from meshpar.planning.planners import plan

    return plan(describe_model("vgg-cifar-small"), [1.0, 0.5], 4, method="ga", **kwargs)


def _plan_api(**kwargs):
    """``planners.plan`` of vgg-cifar-small on speeds 1, 0.5 (batch 4, even), ``kwargs`` added."""
    def call(d):
        from meshpar.models import describe_model
        from meshpar.planning.planners import plan

        return plan(describe_model("vgg-cifar-small"), [1.0, 0.5], 4, method="even", **kwargs)
    return call


def _tf_dataset_of_dataset(**kwargs):
    """``make_tf_dataset`` of a ``NiftiDataset`` of the one-class 16^3 set, ``kwargs`` added."""
    def call(d):
        from meshpar.data.nifti import NiftiDataset, make_tf_dataset

        return make_tf_dataset(NiftiDataset(Path(d) / "one-class", SHAPE), batch_size=2, **kwargs)
    return call


def _models_get_name(name):
    from meshpar import models

    return models.get(name)


def _models_get(d):
    from meshpar import models

    return models.get("resnet50")


def _run_config(**kwargs):
    """``estimator.run_config`` into a new directory, ``kwargs`` added."""
    def call(d):
        from meshpar.training.estimator import run_config

        return run_config(str(Path(d) / "run-config"), **kwargs)
    return call


def _split_rule(total, weights):
    def call(d):
        from meshpar.core.splits import split_sizes

        return split_sizes(total, weights)
    return call


def _profile_workers(addresses, **kwargs):
    from meshpar.runtime.profiling import profile_cluster_workers

    return profile_cluster_workers(addresses, **kwargs)


def _synth_over_a_dataset(d):
    """``write_dataset(force=True)`` into a copy-like dataset of the user's: labels.csv
    and subjects/sub-0001.nii.gz that no data synth wrote."""
    from meshpar.data.phantoms import write_dataset

    root = Path(d) / "users-dataset"
    (root / "subjects").mkdir(parents=True, exist_ok=True)
    (root / "subjects" / "sub-0001.nii.gz").write_bytes(b"the user's scan")
    (root / "labels.csv").write_text("subject,label\nsubjects/sub-0001.nii.gz,AD\n")
    return write_dataset(root, 2, shape=(8, 8, 8), force=True)


def _run_file(name, **fields):
    """``run_model(load_run_info)`` of a model directory ``name`` (written into the
    fixtures' directory) whose run file is a resattnet3d-tiny run's with ``fields``."""
    def call(d):
        import json

        from meshpar.training.run import load_run_info, run_model

        run = {"model": "resattnet3d-tiny", "model_overrides": {}, "labels": ["NC", "AD"],
               "input_shape": [16, 16, 16, 1], "channels": 1, "batch": 2}
        home = Path(d) / name
        home.mkdir(exist_ok=True)
        (home / "meshpar_run.json").write_text(json.dumps(dict(run, **fields)))
        return run_model(str(home), load_run_info(str(home)))
    return call


def _learning_rate(*args, **kwargs):
    from meshpar.training.schedules import learning_rate

    return learning_rate(*args, **kwargs)


def _run_config_in(model_dir):
    from meshpar.training.estimator import run_config

    return run_config(model_dir)


def _make_estimator_in(model_dir):
    from meshpar.training.estimator import make_estimator

    return make_estimator("resattnet3d-tiny", str(model_dir))


def _parse_mesh_shape(text):
    from meshpar.planning.plan import parse_mesh_shape

    return parse_mesh_shape(text)


def _cluster_file(name, jobs):
    """``worker_addresses`` of a TF cluster file ``name`` (written into the fixtures'
    directory) holding ``jobs``."""
    def call(d):
        import json

        from meshpar.runtime.cluster_files import worker_addresses

        path = Path(d) / name
        path.write_text(json.dumps(jobs), encoding="utf-8")
        return worker_addresses(str(path))
    return call


NAN = float("nan")

CASES = [
    # --- split weights: HeterogeneousMeshImpl(...)
    Case("impl-weight-negative", "api", _impl(split_weights={"model": [1, -1]}), "weights must be positive"),
    Case("impl-weight-zero", "api", _impl(split_weights={"model": [1, 0]}), "weights must be positive"),
    Case("impl-weight-nan", "api", _impl(split_weights={"model": [1, NAN]}), "weights must be finite"),
    Case("impl-weight-inf", "api", _impl(split_weights={"model": [1, math.inf]}), "weights must be finite"),
    Case("impl-weight-count", "api", _impl(split_weights={"model": [1, 2, 3]}),
         "has 3 weights; mesh axis 'model' has 2 coordinates"),
    Case("impl-weight-empty", "api", _impl(split_weights={"model": []}), "must not be empty"),
    Case("impl-weight-not-numbers", "api", _impl(split_weights={"model": ["a", "b"]}), "must be numbers"),
    Case("impl-weight-unknown-axis", "api", _impl(split_weights={"batch": [1, 2]}),
         "not in mesh"),
    Case("impl-dim-weight-negative", "api", _impl(dim_split_weights={"f": [2, -1]}),
         "weights must be positive"),
    Case("impl-dim-weight-count", "api", _impl(dim_split_weights={"f": [1, 1, 1]}),
         "has 3 weights"),
    Case("impl-dim-weight-unlaid-dim", "api", _impl(dim_split_weights={"g": [1, 1]}),
         "does not put on any axis"),
    Case("split-rule-nan", "api", _split_rule(5, [1, NAN]), "weights must be finite"),
    # --- split weights: --speeds on every command that takes them
    Case("plan-speeds-negative", "cli", ["plan", "--speeds", "1,-1", "--model", "vgg-cifar"],
         "speeds must be finite and > 0"),
    Case("plan-speeds-zero", "cli", ["plan", "--speeds", "1,0", "--model", "vgg-cifar"],
         "speeds must be finite and > 0"),
    Case("plan-speeds-nan", "cli", ["plan", "--speeds", "1,nan", "--model", "vgg-cifar"],
         "speeds must be finite and > 0"),
    Case("plan-speeds-empty", "cli", ["plan", "--speeds", "", "--model", "vgg-cifar"],
         "comma-separated numbers"),
    Case("plan-speeds-not-number", "cli", ["plan", "--speeds", "1,fast", "--model", "vgg-cifar"],
         "'fast' is not a number"),
    Case("train-speeds-negative", "cli", SYNTH + ["--speeds", "1,-1"], "speeds must be finite and > 0"),
    Case("train-speeds-zero", "cli", SYNTH + ["--speeds", "0,1"], "speeds must be finite and > 0"),
    Case("train-speeds-nan", "cli", SYNTH + ["--speeds", "nan,1"], "speeds must be finite and > 0"),
    # used to train silently on one device
    Case("train-speeds-empty", "cli", SYNTH + ["--speeds", ""], "comma-separated numbers"),
    Case("train-speeds-count-vs-mesh", "cli", SYNTH + ["--speeds", "1,1", "--mesh", "batch:2;model:2"],
         "has 4 processors but --speeds lists 2 devices"),
    Case("demo-speeds-negative", "cli", ["demo", "--speeds", "1,-1", "--skip-training"],
         "speeds must be finite and > 0"),
    Case("demo-speeds-nan", "cli", ["demo", "--speeds", "1,nan", "--skip-training"],
         "speeds must be finite and > 0"),
    Case("bench-speeds-zero", "cli", ["bench", "hetero", "--speeds", "0,1", "--quick"],
         "speeds must be finite and > 0"),
    Case("bench-models-empty-entry", "cli", ["bench", "memory", "--models", "vgg-cifar,,x"],
         "--models must be comma-separated model names, got 'vgg-cifar,,x'"),
    # argparse takes "-1,0.3" for an option ("expected one argument"): the flag's own check
    Case("plan-speeds-negative-first", "cli", ["plan", "--speeds", "-1,0.3"],
         "--speeds: speed 0 is -1; speeds must be finite and > 0"),
    Case("bench-memory-mib-negative-first", "cli", ["bench", "memory", "--memory-mib", "-5,3"],
         "--memory-mib: memory 0 is -5; memory budgets must be finite and > 0"),
    # --- mesh vs devices, layouts, dimensions too small
    # sweep 11: a string's characters were taken as devices, a mesh of size 0 was
    # made, and weights not in a mapping died with AttributeError ('list' ... 'items')
    Case("impl-devices-one-string", "api", _impl_on("ab"),
         "devices must be a sequence of device strings, one per processor"),
    Case("impl-devices-none", "api", _impl_on(None), "devices must be a sequence of device strings"),
    Case("impl-mesh-size-zero", "api", _impl_on([], "model:0"),
         "mesh Shape[model=0] has no processors"),
    Case("impl-weights-not-a-mapping", "api", _impl(split_weights=[1, 2]),
         "split_weights must be a mapping of mesh axis name -> weights, got [1, 2]"),
    Case("impl-dim-weights-not-a-mapping", "api", _impl(dim_split_weights=[1, 2]),
         "dim_split_weights must be a mapping of tensor dimension name -> weights"),
    # sweep 11: a pnum past the mesh wrapped round to another processor's slice
    Case("impl-slice-shape-pnum-past-the-mesh", "api", _slice_of_pnum("slice_shape", 3),
         "pnum 3 is not a processor of mesh Shape[model=3] (pnums 0..2)"),
    Case("impl-slice-begin-pnum-negative", "api", _slice_of_pnum("slice_begin", -1),
         "pnum -1 is not a processor of mesh Shape[model=3] (pnums 0..2)"),
    Case("impl-weights-for-axis-past-the-mesh", "api",  # was a bare IndexError
         lambda d: _impl("model:3")(d).weights_for(("f", 13), mesh_axis=5),
         "mesh_axis 5 is not an axis of mesh Shape[model=3] (0..0)"),
    Case("impl-mesh-vs-devices", "api", _impl("batch:2;model:3", n=5),
         "has 6 processors but 5 devices were given"),
    Case("train-plan-vs-devices", "cli", SYNTH + ["--model", "vgg-cifar-small", "--plan", "{d}/plan.json",
                                                  "--devices", "/cpu:0,/cpu:0,/cpu:0"],
         "--devices names 3 devices but --plan"),  # was the mesh's words, naming no flag
    Case("make-estimator-plan-of-workers-here", "api",
         lambda d: _estimator_of_plan(d),
         "plan= places the mesh on worker tasks (/job:worker/task:0/device:CPU:0, ...), which "
         "this process does not have: pass devices="),
    Case("plan-to-mesh-impl-devices", "api", lambda d: _impl_from_plan(d, ["only-one"]),
         "plan needs 2 devices, got 1"),
    Case("layout-one-dim-two-axes", "api", _impl("a:2;b:2", "f:a;f:b"), "on two mesh axes"),
    Case("layout-two-dims-one-axis", "api", _lower("a:model;b:model", [("a", 4), ("b", 6)]),
         "Two Tensor Dimensions may not map to the same Mesh Dimension"),
    Case("dim-smaller-than-parts", "api", _split_small_dim, "size 2 cannot be split into 3 parts"),
    Case("dim-smaller-than-parts-lowering", "api", _lower("a:model", [("a", 1)]),
         "'a' (size 1) on mesh axis 'model': size 1 cannot be split into 2 parts"),
    # a dimension narrower than the axis stays whole (the planner's rule); an axis wider
    # than every dimension splits nothing
    Case("train-dim-smaller-than-parts", "cli",
         SYNTH + ["--model", "resattnet3d-tiny", "--speeds", "1,1,1,1,1,1,1,1,1", "--batch", "5",
                  "--n-synthetic", "12"],
         "mesh model:9: axis 'model' splits nothing: each dimension resattnet3d-tiny lays out "
         "on it has fewer units than its 9 devices"),
    Case("train-mtf-batch-not-divisible", "cli",
         SYNTH + ["--model", "resattnet3d-tiny", "--speeds", "1,1", "--mesh", "batch:2;model:1",
                  "--mesh-impl", "mtf", "--batch", "3", "--n-synthetic", "12"],
         "cannot cut dimension batch of size 3 into 2 equal parts on mesh axis batch"),
    # --mesh-impl mtf with an uneven split: was 'drop the uneven split weights', given by no flag
    Case("train-mtf-uneven-speeds", "cli",
         SYNTH + ["--model", "vgg-cifar-small", "--speeds", "0.9,0.3", "--mesh-impl", "mtf",
                  "--batch", "2", "--n-synthetic", "8"],
         "--mesh-impl mtf splits evenly only, but --speeds 0.9,0.3 splits model unevenly"),
    Case("train-mtf-uneven-plan", "cli",
         SYNTH + ["--plan", "{d}/plan.json", "--mesh-impl", "mtf", "--n-synthetic", "8"],
         "--mesh-impl mtf splits evenly only, but --plan"),
    # --- plans for another model or device count
    Case("train-plan-other-model", "cli", SYNTH + ["--plan", "{d}/plan.json", "--model", "resattnet3d-tiny"],
         "plan was made for model 'vgg-cifar-small', not 'resattnet3d-tiny'"),
    Case("train-plan-other-batch", "cli",
         SYNTH + ["--plan", "{d}/plan.json", "--model", "vgg-cifar-small", "--batch", "8"],
         "plan.json was planned for batch 4, not --batch 8"),
    Case("train-plan-negative-batch", "cli",
         SYNTH + ["--plan", "{d}/plan-batch-negative.json", "--model", "vgg-cifar-small"],
         "batch must be an integer >= 1, got -1"),
    Case("train-plan-batch-sizes", "cli",
         SYNTH + ["--plan", "{d}/plan-batch-sizes.json", "--model", "vgg-cifar-small"],
         "split_sizes of 'batch' [3, 3] add up to 6, not the plan's batch 4"),
    Case("train-plan-field-type", "cli",
         SYNTH + ["--plan", "{d}/plan-weights-text.json", "--model", "vgg-cifar-small"],
         "field 'split_weights' must be an object of number lists"),
    # --- meshpar evaluate: every run's train arguments checked before any phantom
    Case("evaluate-bad-speeds", "cli", ["evaluate", "--out", "{d}/ev", "--speeds", "0.9,,0.3"],
         "--speeds must be comma-separated numbers, got '0.9,,0.3'"),
    Case("evaluate-unknown-train-arg", "cli", ["evaluate", "--out", "{d}/ev",
                                               "--train-args=--bogus"],
         "one-device configuration: meshpar train: unrecognized arguments: --bogus"),
    Case("evaluate-image-model", "cli", ["evaluate", "--out", "{d}/ev", "--model",
                                         "vgg-cifar-small"],
         "--model vgg-cifar-small takes 2-D images (8x8x3); evaluate trains on 3-D MRI"),
    # one option as the value, without '=': the value, not an argparse error
    Case("evaluate-train-args-one-option-unattached", "cli", ["evaluate", "--out", "{d}/ev",
                                                              "--train-args", "--speeds"],
         "--train-args may not set --speeds: evaluate sets it for every run"),
    # the mesh's batch axis needs a sample per row: was Mesh-TF's 'mtf op import ...
    # cannot be split into 2 parts', after evaluate had written its phantoms
    Case("train-batch-below-batch-axis", "cli",
         SYNTH + ["--model", "resattnet3d-tiny", "--speeds", "1,1", "--mesh", "batch:2",
                  "--batch", "1"],
         "--batch 1 is smaller than the mesh's batch axis (batch:2): each of its 2 rows"),
    Case("evaluate-train-batch-below-batch-axis", "cli",
         ["evaluate", "--out", "{d}/ev", "--speeds", "1,1", "--mesh", "batch:2",
          "--train-args=--batch 1"],
         "uneven-mesh configuration: --batch 1 is smaller than the mesh's batch axis (batch:2)"),
    Case("evaluate-train-lr-nan", "cli", ["evaluate", "--out", "{d}/ev", "--train-args=--lr nan"],
         "one-device configuration: learning rate must be finite and > 0, got nan"),
    Case("evaluate-train-steps-zero", "cli", ["evaluate", "--out", "{d}/ev",
                                              "--train-args=--steps 0"],
         "--steps and --batch must be >= 1"),
    Case("evaluate-train-args-set-the-folds", "cli",
         ["evaluate", "--out", "{d}/ev-folds", "--n", "8", "--folds", "2",
          "--train-args=--folds 3 --steps 1"],
         "--train-args may not set --folds: evaluate sets it for every run (use evaluate's "
         "--folds)"),
    Case("evaluate-train-args-abbreviate-the-model-dir", "cli",
         ["evaluate", "--out", "{d}/ev-dir", "--n", "8", "--folds", "2",
          "--train-args=--model-d /elsewhere"],
         "--train-args may not set --model-dir: evaluate sets it for every run (use "
         "evaluate's --out)"),
    Case("evaluate-test-folds-repeated", "cli",
         ["evaluate", "--out", "{d}/ev-rep", "--n", "8", "--folds", "2", "--test-folds", "0,0"],
         "--test-folds repeats a fold: '0,0'"),
    Case("evaluate-test-fold-out-of-range", "cli", ["evaluate", "--out", "{d}/ev",
                                                    "--test-folds", "7"],
         "--test-folds must be in 0..4, got '7'"),
    Case("evaluate-negative-seed", "cli", ["evaluate", "--out", "{d}/ev", "--seeds", "-1"],
         "--seeds must be >= 0"),
    Case("plan-bad-int-value", "subprocess", ["plan", "--batch", "1.5"],
         "argument --batch: invalid int value: '1.5'"),
    Case("plan-check-model", "api", lambda d: _plan(d).check_compatible("resattnet3d-small", 2),
         "plan was made for model 'vgg-cifar-small', not 'resattnet3d-small'"),
    Case("plan-check-devices", "api", lambda d: _plan(d).check_compatible("vgg-cifar-small", 3),
         "plan is for 2 devices, not 3"),
    Case("train-plan-missing", "cli", SYNTH + ["--plan", "{d}/nope.json", "--model", "vgg-cifar-small"],
         "does not exist"),
    Case("train-plan-not-json", "cli", SYNTH + ["--plan", "{d}/not-json.json", "--model", "vgg-cifar-small"],
         "not valid JSON"),
    # --- cluster files
    Case("plan-cluster-missing-field", "cli", ["plan", "--profile", "{d}/no-latency.json", "--model", "vgg-cifar"],
         "missing field 'latency'"),
    Case("plan-cluster-device-missing-field", "cli",
         ["plan", "--profile", "{d}/device-no-profile.json", "--model", "vgg-cifar"],
         "devices[0] is missing field"),
    Case("plan-profile-model-ref-not-a-reference", "cli",
         ["plan", "--profile", "{d}/profile-model-ref-number.json", "--method", "even"],
         "profile-model-ref-number.json: extra field 'model_ref' must be a string, got 5"),
    Case("plan-profile-address-of-a-deleted-device", "cli",
         ["plan", "--profile", "{d}/profile-address-left.json", "--model", "vgg-cifar"],
         "extra field 'addresses' lists 3 worker addresses for 2 devices: one per device"),
    Case("plan-cluster-not-json", "cli", ["plan", "--profile", "{d}/not-json.json", "--model", "vgg-cifar"],
         "not valid JSON"),
    Case("plan-cluster-missing-file", "cli", ["plan", "--profile", "{d}/nope.json", "--model", "vgg-cifar"],
         "does not exist"),
    Case("plan-profile-is-a-plan", "cli", ["plan", "--profile", "{d}/plan.json", "--model", "vgg-cifar"],
         "{d}/plan.json is a plan (`meshpar plan --out`), not a device profile"),
    Case("train-plan-is-a-profile", "cli",
         SYNTH + ["--plan", "{d}/profile.json", "--model", "vgg-cifar-small"],
         "{d}/profile.json is a device profile (`meshpar profile --out`), not a plan"),
    Case("plan-cluster-tf-format", "cli", ["plan", "--profile", "{d}/tf-dead.json", "--model", "vgg-cifar"],
         "is a TF cluster file (worker addresses), not a device profile"),
    Case("cluster-load-missing-file", "api", _cluster_load("nope.json"), "does not exist",
         error=FileNotFoundError),
    Case("worker-cluster-not-json", "cli", ["worker", "--cluster", "{d}/not-json.json", "--task", "0"],
         "not valid JSON"),
    Case("worker-cluster-missing-file", "cli", ["worker", "--cluster", "{d}/nope.json", "--task", "0"],
         "nope.json"),
    Case("worker-cluster-no-addresses", "cli", ["worker", "--cluster", "{d}/no-latency.json", "--task", "0"],
         "is a device profile (`meshpar profile --out`), not a TF cluster file (job name -> "
         "'host:port' addresses"),  # sweep 13: said "job 'devices' must list 'host:port' ..."
    Case("worker-cluster-port-out-of-range", "cli",
         ["worker", "--cluster", "{d}/port-99999.json", "--task", "0"],
         "'localhost:99999' needs a port in 1..65535"),
    Case("worker-port-in-use", "cli",
         ["worker", "--cluster", "{d}/live-worker.json", "--task", "0"], "{live}: port"),
    Case("worker-port-in-use-says-so", "cli",
         ["worker", "--cluster", "{d}/live-worker.json", "--task", "0"],
         "is already in use on this machine"),
    Case("worker-task-index-not-a-number", "api",
         lambda d: _serve({"worker": ["127.0.0.1:1"]}, "worker", "zero"),
         "the task index must be a whole number, got 'zero'"),
    # str.isdigit let a superscript through to int(): "invalid literal for int()" named
    # nothing (a full-width one was served as task 0: tests/test_bad_input_sweep16.py)
    Case("worker-task-index-superscript", "api",
         lambda d: _serve({"worker": ["127.0.0.1:1"]}, "worker", "\u00b2"),
         "the task index must be a whole number, got '\u00b2'"),
    Case("worker-task-index-negative", "api",
         lambda d: _serve({"worker": ["127.0.0.1:1", "127.0.0.1:2"]}, "worker", -1),
         "--task must be in 0..1 for job 'worker'"),
    Case("worker-no-task", "api", lambda d: _serve({"worker": ["127.0.0.1:1"]}, "worker", None),
         "which task to serve: give --task"),
    Case("worker-cluster-no-tasks", "cli", ["worker", "--cluster", "{d}/no-workers.json",
                                            "--task", "0"], "job 'worker' lists no tasks"),
    # --- an output that is one of the command's inputs: refused, the input kept
    Case("plan-out-is-the-profile", "cli",
         ["plan", "--profile", "{d}/no-latency.json", "--model", "vgg-cifar",
          "--out", "{d}/no-latency.json"],
         "--out {d}/no-latency.json is the --profile file"),
    Case("train-model-dir-is-the-data", "cli",
         ["train", "--data", "{d}/nan", "--model", "resattnet3d-tiny", "--steps", "1",
          "--model-dir", "{d}/nan"],
         "--model-dir {d}/nan is the --data directory; give another one for the checkpoints"),
    Case("data-synth-empty-label", "subprocess", ["data", "synth", "--out", "{d}/synth-empty",
                                                  "--n", "4", "--labels", ",AD"],
         "argument --labels: a class name is empty in ',AD'"),
    Case("train-label-twice", "subprocess", SYNTH + ["--labels", "NC,NC"],
         "argument --labels: class name 'NC' is given twice in 'NC,NC'"),
    Case("train-one-class", "cli", ["train", "--data", "{d}/one-class"] + TRAIN + ["--steps", "1"],
         "the training subjects hold no AD subject (NC 8, AD 0)"),
    # said before the 400 phantoms of --synthetic are written (it took 13 s, 62 s loaded)
    Case("train-model-dir-of-another-tool", "cli", SYNTH + ["--model-dir", "{d}/foreign-model"],
         "{d}/foreign-model holds checkpoint, graph.pbtxt but no meshpar_run.json"),
    Case("train-model-dir-is-a-file", "cli",
         ["train", "--synthetic", "--model", "resattnet3d-tiny", "--steps", "1",
          "--model-dir", "{d}/plan.json"],
         "--model-dir {d}/plan.json is a file, not a directory"),
    Case("train-trace-out-missing-directory", "cli",
         ["train", "--synthetic", "--model", "resattnet3d-tiny", "--steps", "1",
          "--trace-step", "1", "--trace-out", "{d}/no-such-dir/trace.json"],
         "{d}/no-such-dir/trace.json: its directory {d}/no-such-dir does not exist"),
    Case("profile-device-type-without-cluster", "cli",
         ["profile", "--quick", "--device-type", "GPU"], "--device-type goes with --cluster"),
    Case("profile-batch-without-model", "cli",
         ["profile", "--quick", "--batch", "4"], "--batch goes with --model"),
    Case("profile-out-missing-directory", "cli",
         ["profile", "--quick", "--out", "{d}/no-such-dir/profile.json"],
         "{d}/no-such-dir/profile.json: its directory {d}/no-such-dir does not exist"),
    Case("train-trace-out-is-the-plan", "cli",
         SYNTH + ["--model", "vgg-cifar-small", "--plan", "{d}/plan.json", "--trace-step", "1",
                  "--trace-out", "{d}/plan.json"],
         "--trace-out {d}/plan.json is the --plan file"),
    Case("train-trace-out-is-a-volume", "cli",
         ["train", "--data", "{d}/nan"] + TRAIN + ["--steps", "1", "--trace-step", "1",
                                                   "--trace-out", "{d}/nan/s0.nii.gz"],
         "--trace-out {d}/nan/s0.nii.gz is a file of the --data directory"),
    Case("train-trace-out-is-the-run-file", "cli",
         SYNTH + ["--model-dir", "{d}/foreign-model", "--trace-step", "1",
                  "--trace-out", "{d}/foreign-model/meshpar_run.json"],
         "is the run's own meshpar_run.json in --model-dir"),
    Case("predict-out-is-a-volume", "cli",
         ["predict", "--model-dir", "{d}", "--data", "{d}/nan", "--out", "{d}/nan/s1.nii.gz",
          "--force"],
         "--out {d}/nan/s1.nii.gz is a file of the --data directory {d}/nan"),
    Case("predict-out-is-a-checkpoint-file", "cli",
         ["predict", "--model-dir", "{d}/foreign-model", "--data", "{d}/nan", "--out",
          "{d}/foreign-model/checkpoint", "--force"],
         "is the run's own checkpoint in --model-dir"),
    Case("predict-out-is-a-directory", "cli",
         ["predict", "--model-dir", "{d}", "--data", "{d}/nan", "--out", "{d}/nan", "--force"],
         "--out {d}/nan is a directory"),
    Case("train-trace-out-is-a-new-runs-file", "cli",
         SYNTH + ["--model-dir", "{d}/not-yet", "--trace-step", "1",
                  "--trace-out", "{d}/not-yet/meshpar_run.json"],
         "is the run's own meshpar_run.json in --model-dir"),
    Case("train-synthetic-fewer-images-than-batch", "cli",
         SYNTH + ["--model", "vgg-cifar-small", "--n-synthetic", "10", "--val-fraction", "0.75",
                  "--batch", "4"], "--batch 4 is larger than the 2 training images"),
    Case("profile-out-is-the-cluster-file", "cli",
         ["profile", "--cluster", "{d}/tf-dead.json", "--out", "{d}/tf-dead.json"],
         "--out {d}/tf-dead.json is the --cluster file"),
    Case("predict-out-is-the-labels", "cli",
         ["predict", "--model-dir", "{d}", "--data", "{d}/nan", "--out", "{d}/nan/labels.csv",
          "--force"],
         "labels.csv is the --data labels file"),
    Case("plan-out-is-the-plot", "cli",
         ["plan", "--speeds", "1,1", "--model", "vgg-cifar-small", "--out", "{d}/same.png",
          "--plot", "{d}/same.png"], "--out and --plot both name {d}/same.png"),
    Case("plan-plot-missing-dir", "cli",
         ["plan", "--speeds", "1,1", "--model", "vgg-cifar-small", "--plot",
          "{d}/no-such-dir/plan.png"], "no-such-dir/plan.png: its directory"),
    Case("train-rebalance-profile-is-a-plan", "cli",
         SYNTH + ["--model", "resattnet3d-tiny", "--cluster", "{d}/tf-dead.json", "--speeds", "1,1",
                  "--rebalance", "--rebalance-profile", "{d}/plan.json"],
         "--rebalance-profile {d}/plan.json is not a device profile"),
    Case("train-rebalance-profile-missing", "cli",
         SYNTH + ["--model", "resattnet3d-tiny", "--cluster", "{d}/tf-dead.json", "--speeds", "1,1",
                  "--rebalance", "--rebalance-profile", "{d}/nope.json"],
         "device profile {d}/nope.json does not exist"),
    Case("train-plan-for-other-workers", "cli",  # refused before the dead worker is reached
         SYNTH + ["--model", "vgg-cifar-small", "--plan", "{d}/plan-other-workers.json",
                  "--cluster", "{d}/tf-dead.json"],
         "was made for workers at {live}, 127.0.0.1:1; this cluster lists {live}, {dead}"),
    Case("train-speeds-vs-cluster", "cli",
         SYNTH + ["--model", "resattnet3d-tiny", "--cluster", "{d}/tf-dead.json",
                  "--speeds", "1,1,1"],
         "--speeds gives 3 devices' speeds but the cluster ({d}/tf-dead.json) has 2"),
    Case("train-cluster-address-twice", "cli",
         SYNTH + ["--model", "resattnet3d-tiny", "--cluster", "{d}/address-twice.json",
                  "--speeds", "1,1"],
         "localhost:2222 is listed twice (worker task 0 and worker task 1)"),
    Case("worker-threads-negative", "subprocess",
         ["worker", "--cluster", "{d}/no-workers.json", "--task", "0", "--threads", "-1"],
         "argument --threads: must be >= 0, got -1"),
    Case("worker-threads-huge", "subprocess",
         ["worker", "--cluster", "{d}/no-workers.json", "--task", "0", "--threads",
          "100000000000000000"],
         "argument --threads: must be at most 4096 threads, got 100000000000000000"),
    Case("train-threads-huge", "subprocess", SYNTH + ["--threads", "100000000000000000"],
         "argument --threads: must be at most 4096 threads, got 100000000000000000"),
    # --- numbers each flag must be in
    Case("plan-seed-negative", "subprocess", ["plan", "--speeds", "1,1", "--seed", "-1"],
         "argument --seed: must be >= 0, got -1"),
    Case("bench-train-verify-negative", "subprocess", ["bench", "train", "--verify", "-1"],
         "argument --verify: must be >= 0, got -1"),
    Case("bench-train-verify-rounds-zero", "subprocess", ["bench", "train", "--verify-rounds", "0"],
         "argument --verify-rounds: must be >= 1, got 0"),
    # an empty output path read as none: train's checkpoints went to a temporary
    # directory, predict wrote ./.tmp and failed on its rename (sweep 11)
    Case("train-model-dir-empty", "subprocess", SYNTH + ["--model-dir", ""],
         "argument --model-dir: expected a path, got ''"),
    Case("predict-out-empty", "subprocess", ["predict", "--model-dir", "{d}", "--data", "{d}",
                                             "--out", ""],
         "argument --out: expected a path, got ''"),
    Case("plan-out-blank", "subprocess", ["plan", "--speeds", "1", "--out", " "],
         "argument --out: expected a path, got ' '"),
    Case("data-check-empty-directory", "subprocess", ["data", "check", ""],
         "argument directory: expected a path, got ''"),
    # an empty input path read as none: the run went to this machine, unplanned (sweep 11)
    Case("train-cluster-empty", "subprocess", SYNTH + ["--cluster", ""],
         "argument --cluster: expected a path, got ''"),
    Case("train-plan-empty", "subprocess", SYNTH + ["--plan", ""],
         "argument --plan: expected a path, got ''"),
    Case("train-replay-replans-empty", "subprocess", SYNTH + ["--replay-replans", ""],
         "argument --replay-replans: expected a path, got ''"),
    Case("profile-cluster-empty", "subprocess", ["profile", "--cluster", ""],
         "argument --cluster: expected a path, got ''"),
    Case("predict-batch-zero", "subprocess", ["predict", "--model-dir", "{d}", "--batch", "0"],
         "argument --batch: must be >= 1, got 0"),
    Case("synth-voxel-nan", "subprocess", ["data", "synth", "--out", "{d}/vox", "--voxel-mm", "nan"],
         "argument --voxel-mm: must be finite and > 0, got nan"),
    Case("plan-speeds-too-far-apart", "cli", ["plan", "--speeds", "1e-50,1"],
         "speed 0 (1e-50) is over 1e+06 times slower than the fastest (1)"),
    Case("plan-speed-too-large", "cli", ["plan", "--speeds", "1e300,1"],
         "speed 0 is 1e+300; speeds are relative"),
    Case("plan-memory-below-a-byte", "cli", ["plan", "--speeds", "1,1", "--memory-mib", "1e-300"],
         "memory 0 is 1e-300 MiB, less than a byte"),
    # a budget under 1 MiB used to read "over the 0.0 MiB ... of its 0.0 MiB"
    Case("plan-memory-under-a-mib", "cli", ["plan", "--speeds", "1,1", "--memory-mib", "0.001"],
         "over the 0.00075 MiB a plan may count on of its 0.000999 MiB"),
    # used to be ignored in silence: the plan was not the one asked for
    Case("plan-generations-with-exact", "cli",
         ["plan", "--speeds", "1,1", "--method", "exact", "--generations", "5"],
         "--generations goes with --method ga; --method exact would ignore it"),
    Case("plan-time-limit-with-proportional", "cli",
         ["plan", "--speeds", "1,1", "--method", "proportional", "--time-limit", "5"],
         "--time-limit goes with --method ga or exact; --method proportional would ignore it"),
    Case("plan-ga-time-limit-nan", "cli", ["plan", "--speeds", "1,1", "--time-limit", "nan"],
         "--time-limit must be > 0 and finite, got nan"),
    Case("plan-batch-too-large-ga", "cli",  # was an OverflowError traceback
         ["plan", "--speeds", "1,1", "--batch", str(10 ** 30)],
         f"batch {10 ** 30} is too large to split (at most 2**53)"),
    Case("plan-batch-too-large-even", "cli",  # hung: split_sizes added 10**14 units one by one
         ["plan", "--speeds", "1,1", "--batch", str(10 ** 30), "--method", "even"],
         "too large to split (at most 2**53)"),
    Case("plan-plot-over-a-saved-plan", "cli",  # was replaced by the PNG: the plan was lost
         ["plan", "--speeds", "1,1", "--method", "even", "--plot", "{d}/plan.json"],
         "{d}/plan.json exists and is not a PNG image; it is kept (remove it, or give "
         "another --plot)"),
    Case("plan-out-missing-directory", "cli", ["plan", "--speeds", "1,1", "--out",
                                               "{d}/no-such-dir/plan.json"],
         "no-such-dir/plan.json: its directory"),
    Case("train-mesh-axis-lays-out-nothing", "cli", SYNTH + ["--speeds", "1,1", "--mesh", "foo:2"],
         "--mesh foo:2: axis 'foo'; the mesh's axes are batch (the samples) and model"),
    Case("train-step-schedule-without-decay-steps", "cli", SYNTH + ["--lr-schedule", "step"],
         "--lr-schedule step needs --lr-decay-steps"),
    Case("train-diverged-nan-loss", "cli",  # was NanLossDuringTrainingError's traceback
         SYNTH + TRAIN + ["--n-synthetic", "8", "--steps", "4", "--optimizer", "sgd", "--lr", "1e9"],
         "training diverged: the loss became NaN"),
    Case("train-diverged-keep-best", "cli",  # was the AUC's "predictions must be in [0, 1]"
         SYNTH + TRAIN[:-3] + ["--n-synthetic", "16", "--steps", "4", "--keep-best",
                               "--checkpoint-every", "2", "--optimizer", "sgd", "--lr", "1e9"],
         "training diverged: the loss became NaN"),
    Case("train-device-type-without-cluster", "cli",  # was ignored: trained on this CPU
         SYNTH + TRAIN + ["--device-type", "GPU"],
         "--device-type goes with --cluster; this run would ignore it"),
    Case("train-worker-timeout-without-cluster", "cli",  # was ignored in silence
         SYNTH + TRAIN + ["--worker-timeout", "10"],
         "--worker-timeout goes with --cluster; this run would ignore it"),
    Case("train-trace-step-after-the-last", "cli", SYNTH + ["--trace-step", "5"],
         "--trace-step must be in 1..--steps (1), got 5"),
    Case("data-check-a-file", "cli", ["data", "check", "{d}/plan.json"], "not a directory"),
    Case("worker-cluster-empty", "cli", ["worker", "--cluster", "{d}/empty.json", "--task", "0"],
         "no cluster jobs"),
    Case("worker-tf-config-task-not-an-object", "cli", ["worker", "--cluster", "{d}/task-list.json"],
         "task-list.json: \"task\" must be an object such as {\"type\": \"worker\", \"index\": 0}"),
    Case("worker-cluster-address-without-host", "cli",  # was served at ':2222'
         ["worker", "--cluster", "{d}/no-host.json", "--task", "0"],
         "no-host.json: job 'worker': ':2222' needs a host (a name or IP address, no spaces) "
         "before the ':port'"),
    Case("worker-cluster-host-with-a-space", "cli",
         ["worker", "--cluster", "{d}/host-with-space.json", "--task", "0"],
         "'local host:2223' needs a host"),
    # --- damaged run files: one line naming the file, not a TypeError traceback
    Case("predict-run-file-not-an-object", "cli",
         ["predict", "--model-dir", "{d}/run-int", "--data", "{d}/nope", "--out", "{d}/p.csv"],
         "run-int/meshpar_run.json: expected a JSON object, got int"),
    Case("predict-run-file-overrides-null", "cli",
         ["predict", "--model-dir", "{d}/run-null", "--data", "{d}/nope", "--out", "{d}/p.csv"],
         "run-null/meshpar_run.json: malformed model_overrides=None"),
    Case("predict-best-record-not-json", "cli",
         ["predict", "--model-dir", "{d}/run-bad-best", "--data", "{d}/nope", "--out",
          "{d}/p.csv", "--checkpoint", "best"], "run-bad-best/best/best.json: cannot be read"),
    Case("data-synth-n-beyond-int64", "cli",  # was an OverflowError traceback
         ["data", "synth", "--out", "{d}/huge-n", "--n", str(10 ** 23)],
         f"n must be at most 2**63 - 1, got {10 ** 23}"),
    Case("train-n-synthetic-beyond-int64", "cli",
         SYNTH + TRAIN + ["--n-synthetic", str(10 ** 23)], "n must be at most 2**63 - 1"),
    Case("worker-task-out-of-range", "cli", ["worker", "--cluster", "{d}/tf-dead.json", "--task", "7"],
         "--task must be in 0..1"),
    # --- unreachable workers: a bounded wait, and the message names the address
    Case("bench-unreachable-worker", "cli", ["bench", "hetero", "--quick", "--cluster", "{d}/tf-dead.json"],
         "{dead} is unreachable"),
    Case("bench-unreachable-worker-subprocess", "subprocess",
         ["bench", "hetero", "--quick", "--cluster", "{d}/tf-dead.json"], "{dead} is unreachable"),
    Case("bench-cluster-not-json", "cli", ["bench", "hetero", "--cluster", "{d}/not-json.json"],
         "not valid JSON"),
    Case("bench-cluster-missing", "cli", ["bench", "hetero", "--cluster", "{d}/no-such.json"],
         "cluster file {d}/no-such.json not found"),
    Case("bench-out-is-a-file", "cli",  # before anything is measured, not after
         ["bench", "hetero", "--quick", "--out", "{d}/empty.json"],
         "--out {d}/empty.json is a file; it names a directory for the results"),
    Case("data-synth-out-under-a-file", "cli",  # was '[Errno 20] Not a directory', no flag
         ["data", "synth", "--out", "{d}/empty.json/sub", "--n", "2"],
         "--out {d}/empty.json/sub: {d}/empty.json is a file, so no directory can be made"),
    Case("bench-train-out-is-a-file", "cli", ["bench", "train", "--out", "{d}/empty.json"],
         "--out {d}/empty.json is a file"),
    Case("profile-out-is-a-directory", "cli", ["profile", "--quick", "--out", "{d}/foreign-model"],
         "{d}/foreign-model is a directory; give a file name"),
    Case("evaluate-one-fold", "cli", ["evaluate", "--out", "{d}/ev-one-fold", "--folds", "1"],
         "--folds must be >= 2, got 1"),
    Case("evaluate-out-is-a-file", "cli", ["evaluate", "--out", "{d}/empty.json"],
         "--out {d}/empty.json is a file"),
    Case("train-n-synthetic-0", "subprocess", ["train", "--synthetic", "--n-synthetic", "0"],
         "--n-synthetic: must be >= 1, got 0"),
    # --- flags the chosen loss, schedule or data would silently ignore
    Case("train-focal-gamma-without-focal", "cli", SYNTH + ["--focal-gamma", "3"],
         "--focal-gamma goes with --loss focal; this run would ignore it"),
    Case("train-decay-steps-with-cosine", "cli", SYNTH + ["--lr-decay-steps", "5"],
         "--lr-decay-steps goes with --lr-schedule step"),
    Case("train-decay-rate-with-constant", "cli",
         SYNTH + ["--lr-schedule", "constant", "--lr-decay-rate", "0.5"],
         "--lr-decay-rate goes with --lr-schedule step"),
    Case("train-lr-min-with-constant", "cli", SYNTH + ["--lr-schedule", "constant", "--lr-min", "0.1"],
         "--lr-min goes with --lr-schedule cosine"),
    Case("train-n-synthetic-with-data", "cli",
         ["train", "--data", "{d}/corrupt", "--n-synthetic", "5"],
         "--n-synthetic goes with --synthetic"),
    # --- NIfTI data: `data check` reports (exit 1), `train` stops with one line (exit 2)
    Case("check-corrupt", "cli", ["data", "check", "{d}/corrupt", "--shape", "16,16,16"],
         "corrupt/s3.nii.gz: cannot be read as NIfTI", code=1),
    Case("check-truncated", "cli", ["data", "check", "{d}/truncated", "--shape", "16,16,16"],
         "truncated/s3.nii: is truncated", code=1),
    Case("check-wrong-rank", "cli", ["data", "check", "{d}/rank", "--shape", "16,16,16"],
         "rank/s3.nii.gz: has shape (16, 16)", code=1),
    Case("check-nan", "cli", ["data", "check", "{d}/nan", "--shape", "16,16,16", "--content"],
         "nan/s3.nii.gz: 1 of 4096 voxels are NaN", code=1),
    Case("check-gzip-cut", "cli", ["data", "check", "{d}/gzcut", "--shape", "16,16,16", "--content"],
         "gzcut/s3.nii.gz: voxel data cannot be read", code=1),
    Case("check-missing-dir", "cli", ["data", "check", "{d}/no-such-dir"], "dataset directory does not exist"),
    Case("train-corrupt", "cli", ["train", "--data", "{d}/corrupt", "--steps", "4"] + TRAIN,
         "corrupt/s3.nii.gz: cannot be read as NIfTI"),
    Case("train-truncated", "cli", ["train", "--data", "{d}/truncated", "--steps", "4"] + TRAIN,
         "truncated/s3.nii: is truncated"),
    Case("train-wrong-rank", "cli", ["train", "--data", "{d}/rank", "--steps", "4"] + TRAIN,
         "expected a 3-D volume"),
    # NaN voxels and a cut gzip stream are met while tf.data streams: used to be a TF traceback
    Case("train-nan", "cli", ["train", "--data", "{d}/nan", "--steps", "4"] + TRAIN,
         "nan/s3.nii.gz: 1 of 4096 voxels are NaN or infinite"),
    Case("train-gzip-cut-subprocess", "subprocess", ["train", "--data", "{d}/gzcut", "--steps", "4"] + TRAIN,
         "gzcut/s3.nii.gz: voxel data cannot be read"),
    # --- model names, step counts, mesh strings
    Case("train-unknown-model", "cli", SYNTH + ["--model", "resnet50"], "unknown model 'resnet50'"),
    Case("plan-unknown-model", "cli", ["plan", "--speeds", "1,1", "--model", "resnet50"],
         "unknown model 'resnet50'"),
    Case("models-get-unknown", "api", _models_get, "unknown model 'resnet50'"),
    Case("train-steps-0", "cli", ["train", "--synthetic", "--steps", "0"], "--steps and --batch must be >= 1"),
    Case("train-steps-negative", "cli", ["train", "--synthetic", "--steps", "-2"], "must be >= 1"),
    Case("bench-steps-0", "cli", ["bench", "hetero", "--steps", "0"], "--steps must be >= 1"),
    Case("bench-cpu-period-too-short", "cli", ["bench", "train", "--cpu-period-ms", "0.5"],
         "--cpu-period-ms must be 1 to 1000, got 0.5"),
    Case("bench-cpu-period-with-cluster", "cli",
         ["bench", "hetero", "--cluster", "{d}/tf-dead.json", "--cpu-period-ms", "2"],
         "--cluster runs on existing workers"),
    Case("bench-cpu-period-without-throttle", "cli",
         ["bench", "hetero", "--quick", "--throttle", "none", "--cpu-period-ms", "2"],
         "period_us needs a throttle"),
    Case("mesh-no-size", "cli", SYNTH + ["--speeds", "1,1", "--mesh", "model"], "--mesh: bad shape 'model'"),
    Case("mesh-size-not-int", "cli", SYNTH + ["--speeds", "1,1", "--mesh", "model:x"], "bad shape 'model:x'"),
    Case("mesh-size-0", "cli", SYNTH + ["--speeds", "1,1", "--mesh", "model:0;batch:0"], "size >= 1"),
    Case("mesh-size-negative", "cli", SYNTH + ["--speeds", "1,1", "--mesh", "model:-2"], "size >= 1"),
    Case("mesh-no-name", "cli", SYNTH + ["--speeds", "1,1", "--mesh", ":2"], "needs a name"),
    Case("mesh-empty", "cli", SYNTH + ["--speeds", "1,1", "--mesh", ";;"], "bad shape ';;'"),
    Case("mesh-repeated-axis", "cli", SYNTH + ["--speeds", "1,1", "--mesh", "model:2;model:1"],
         "axis names must differ"),
    Case("mesh-three-axes", "cli", SYNTH + ["--speeds", "1,1", "--mesh", "a:1;b:1;c:2"],
         "axis 'a'; the mesh's axes are batch (the samples) and model"),
    Case("mesh-without-speeds", "cli", SYNTH + ["--mesh", "model:2"], "--mesh goes with --speeds"),
    # sweep 12: a voxel size past what the phantoms can draw wrote files in silence
    # (NaN voxels, a NaN in phantoms.json, a singular affine) or a LinAlgError traceback
    Case("data-synth-voxel-huge", "cli",
         ["data", "synth", "--out", "{d}/vox-huge", "--n", "2", "--voxel-mm", "1e308"],
         "voxel size 1e+308 mm x 32 voxels is over a 600 mm field of view"),
    Case("data-synth-voxel-fov-too-large", "cli",
         ["data", "synth", "--out", "{d}/vox-fov", "--n", "2", "--voxel-mm", "100"],
         "voxel size 100 mm x 32 voxels is over a 600 mm field of view"),
    Case("data-synth-voxel-tiny", "cli",
         ["data", "synth", "--out", "{d}/vox-tiny", "--n", "2", "--voxel-mm", "1e-300"],
         "voxel size 1e-300 mm is under 0.001 mm"),
    # sweep 12: a cluster file under a file or not text was '[Errno 20] Not a directory: ...'
    # or "'utf-8' codec can't decode byte 0xff ...", neither naming the cluster file
    Case("worker-cluster-under-a-file", "cli",
         ["worker", "--cluster", "{d}/empty.json/x", "--task", "0"],
         "cluster file {d}/empty.json/x not found"),
    Case("bench-cluster-under-a-file", "cli",
         ["bench", "hetero", "--quick", "--cluster", "{d}/empty.json/x"],
         "cluster file {d}/empty.json/x not found"),
    Case("worker-cluster-not-text", "cli", ["worker", "--cluster", "{d}/binary.json", "--task", "0"],
         "cluster file {d}/binary.json: not UTF-8 text"),
    # a TF_CONFIG-style file's own task index out of range was blamed on --task, not given
    Case("worker-file-task-index-out-of-range", "cli", ["worker", "--cluster", "{d}/task-3.json"],
         "the \"task\" index in {d}/task-3.json must be in 0..0 for job 'worker', got 3"),
    # a results file --out cannot take was found after the whole benchmark had run (its
    # results lost), and a file of another kind there was replaced; --batch 0 (or the
    # unreachable worker) is what the old code said first
    Case("bench-out-json-is-a-directory", "cli",
         ["bench", "hetero", "--quick", "--cluster", "{d}/tf-dead.json", "--out", "{d}/out-json-dir"],
         "--out {d}/out-json-dir: {d}/out-json-dir/hetero.json is a directory"),
    Case("bench-train-out-holds-another-file", "cli",
         ["bench", "train", "--out", "{d}/out-foreign", "--batch", "0"],
         "{d}/out-foreign/train.json exists and is not a `meshpar bench train` result; it is kept"),
    Case("bench-memory-out-holds-another-file", "cli",
         ["bench", "memory", "--out", "{d}/out-foreign", "--batch", "0"],
         "{d}/out-foreign/memory.json exists and is not a `meshpar bench memory` result"),
    # --speeds and --throttle set up the LocalCluster: with --cluster they were ignored in
    # silence (the old code went on to the workers, here unreachable)
    Case("bench-speeds-with-cluster", "cli",
         ["bench", "hetero", "--quick", "--cluster", "{d}/tf-dead.json", "--speeds", "0.5,0.5"],
         "--speeds sets up a LocalCluster's workers; --cluster runs on existing workers"),
    Case("bench-train-throttle-with-cluster", "cli",
         ["bench", "train", "--cluster", "{d}/tf-dead.json", "--throttle", "signal"],
         "--throttle sets up a LocalCluster's workers; --cluster runs on existing workers"),
    # data synth --force where a file it writes has a directory (or subjects/ a file) in its
    # place: '[Errno 21] Is a directory ...' after the subjects were written, .partial left
    Case("data-synth-force-labels-csv-a-directory", "cli",
         ["data", "synth", "--out", "{d}/synth-labels-dir", "--n", "2", "--shape", "8,8,8", "--force"],
         "{d}/synth-labels-dir/labels.csv is a directory where a file of the dataset goes"),
    Case("data-synth-force-subjects-a-file", "cli",
         ["data", "synth", "--out", "{d}/synth-subjects-file", "--n", "2", "--shape", "8,8,8",
          "--force"], "{d}/synth-subjects-file/subjects is a file where the subjects' directory goes"),
    Case("data-synth-force-subject-a-directory", "cli",
         ["data", "synth", "--out", "{d}/synth-subject-dir", "--n", "2", "--shape", "8,8,8", "--force"],
         "{d}/synth-subject-dir/subjects/sub-0002.nii.gz is a directory where a file of the"),
    # a labels.csv that is a directory was reported missing: 'no labels.csv in the dataset directory'
    Case("data-check-labels-csv-a-directory", "cli", ["data", "check", "{d}/synth-labels-dir"],
         "{d}/synth-labels-dir/labels.csv: is a directory, not the labels CSV file"),
    # a budget past a float's range in bytes became inf: bench went on with it (here the
    # later --memory-headroom was what the old code said), plan blamed "device 'w0'"
    Case("bench-memory-mib-beyond-bytes", "cli",
         ["bench", "memory", "--memory-mib", "1e305", "--memory-headroom", "2"],
         "--memory-mib: memory 0 is 1e+305 MiB, too many bytes to count"),
    Case("plan-memory-mib-beyond-bytes", "cli",
         ["plan", "--speeds", "1,1", "--model", "vgg-cifar-small", "--memory-mib", "1,1e305"],
         "--memory-mib: memory 1 is 1e+305 MiB, too many bytes to count"),
    # said 'no --cluster given' to a --cluster TF_CONFIG (the test environment has none)
    Case("worker-cluster-tf-config-unset", "cli", ["worker", "--cluster", "TF_CONFIG", "--task", "0"],
         "--cluster TF_CONFIG reads the TF_CONFIG environment variable, which is not set"),
    # a one-voxel grid is constant: every good subject was listed bad ('is constant'), exit 1
    Case("data-check-shape-one-voxel", "cli",
         ["data", "check", "{d}/one-class", "--shape", "1,1,1", "--content"],
         "--shape 1,1,1: each size of the grid must be at least 2"),
    # a batch the batch splits cannot share out: refused after profiling and the alone runs
    Case("bench-train-batch-below-workers", "cli",
         ["bench", "train", "--models", "vgg-cifar-small", "--batch", "1", "--speeds", "0.9,0.3"],
         "--batch 1 is smaller than the 2 workers: a batch split gives each at least one sample"),
    # a listener that is not a TF worker (the fixture's {live} accepts and never answers):
    # the benchmark's session waited for it forever
    Case("bench-not-a-tf-worker", "cli", ["bench", "hetero", "--quick", "--cluster", "{d}/live-worker.json"],
         "worker task 0 at {live} answers but not as a TensorFlow gRPC server within 5 s"),
    # a subject's "file" that is a directory was listed as not existing
    Case("data-check-subject-a-directory", "cli", ["data", "check", "{d}/dir-subject", "--shape", "16,16,16"],
         "dir-subject/s0.nii.gz: named in labels.csv line 2 is a directory, not a file", code=1),
    # --job that is not the file's own task, without --task: ignored, the file's task served
    Case("worker-job-against-the-files-task", "cli", ["worker", "--cluster", "{d}/task-ps.json", "--job", "ps"],
         "--job ps is not the task of {d}/task-ps.json (worker:0); give --task too, or leave --job out"),
    # a share below what a cgroup can hold (1 ms in the longest period): an OSError traceback
    # ('[Errno 22] Invalid argument' writing cpu.max) under the cgroup throttle
    Case("bench-speed-below-a-cgroup-share", "cli", ["bench", "hetero", "--quick", "--speeds", "0.0001,1"],
         "LocalCluster speeds are CPU shares in [0.001, 1], got [0.0001, 1.0]"),
    # --- sweep 13: hand-edited plans and profiles
    # a misspelt field was ignored: the run trained on an even split, not the plan's
    Case("train-plan-model-ref-not-a-reference", "cli",
         SYNTH + ["--plan", "{d}/plan-model-ref-number.json"],
         "plan-model-ref-number.json: extra field 'model_ref' must be the network's file or "
         "module reference (a string), got 5"),
    Case("train-plan-weights-deleted", "cli",
         SYNTH + ["--plan", "{d}/plan-weights-deleted.json", "--model", "vgg-cifar-small"],
         "split_sizes of 'batch' [3, 1] are not what an even split gives (it has no weights) "
         "([2, 2])"),
    Case("train-plan-misspelt-field", "cli",
         SYNTH + ["--plan", "{d}/plan-misspelt-field.json", "--model", "vgg-cifar-small"],
         "plan-misspelt-field.json: unknown field 'split_weight'; a plan's fields are method, "),
    # a size of 2.5 was cut to 2 (trained in silence); an infinite batch was an
    # OverflowError traceback
    Case("train-plan-mesh-size-fraction", "cli",
         SYNTH + ["--plan", "{d}/plan-mesh-fraction.json", "--model", "vgg-cifar-small"],
         "field 'mesh_shape' must be a list of [axis, size] pairs, got [[\"batch\", 2.5]"),
    Case("train-plan-batch-infinite", "cli",
         SYNTH + ["--plan", "{d}/plan-batch-infinite.json", "--model", "vgg-cifar-small"],
         "field 'batch' must be an integer, got Infinity"),
    Case("plan-mesh-size-zero", "api", lambda d: _plan_of(mesh_shape=(("batch", 0),), devices=()),
         "plan: mesh axis 'batch' needs a whole size >= 1, got 0"),
    Case("plan-mesh-axis-twice", "api",
         lambda d: _plan_of(mesh_shape=(("batch", 1), ("batch", 2)), devices=("a", "b")),
         "plan: mesh axes need distinct, non-empty names, got ['batch', 'batch']"),
    # split sizes the runtime would not cut by (it cuts by the layout and the mesh) were
    # accepted and ignored: a hand-edited plan trained on other sizes than it showed
    Case("plan-sizes-of-a-dim-not-laid-out", "api",
         lambda d: _plan_of(mesh_shape=(("batch", 1), ("model", 2)), devices=("a", "b"),
                            layout=(("batch", "batch"),),
                            split_sizes={"conv1_filters": [5, 1]}),
         "plan: split_sizes of 'conv1_filters' [5, 1] have 2 parts but its layout does not "
         "split 'conv1_filters'"),
    Case("plan-sizes-of-other-parts-than-the-axis", "api",
         lambda d: _plan_of(mesh_shape=(("batch", 1), ("model", 2)), devices=("a", "b"),
                            layout=(("conv1_filters", "model"),),
                            split_sizes={"conv1_filters": [3, 2, 1]}),
         "plan: split_sizes of 'conv1_filters' [3, 2, 1] have 3 parts but its layout puts "
         "'conv1_filters' on mesh axis 'model' of size 2"),
    # an "extra" that is not an object was a TypeError traceback
    Case("plan-profile-extra-not-an-object", "cli",
         ["plan", "--profile", "{d}/profile-extra-list.json", "--model", "vgg-cifar-small"],
         "profile-extra-list.json: field 'extra' must be an object"),
    # a misspelt optional field was dropped in silence; a null device string became 'None'
    Case("plan-profile-misspelt-device-field", "cli",
         ["plan", "--profile", "{d}/profile-device-fields.json", "--model", "vgg-cifar-small"],
         "devices[0]: unknown field 'slice_efficiencies'; the fields are name, device, "),
    Case("cluster-device-string-null", "api",
         lambda d: _cluster_from(devices=[{"name": "w0", "device": None, "profile": [[1, 1e9]],
                                           "memory_bytes": 2 ** 30}]),
         "cluster: devices[0]: field 'device' must be a string, got None"),
    # a string was taken character by character: from_speeds("12") made speeds 1 and 2
    Case("cluster-from-speeds-a-string", "api", lambda d: _from_speeds("12"),
         "speeds must be a list of numbers, got '12'"),
    Case("cluster-from-speeds-a-bool", "api", lambda d: _from_speeds([True, 1]),
         "speed 0 must be a number, got True"),
    Case("cluster-bandwidth-text", "api", lambda d: _cluster_from(bandwidth="1e9"),
         "cluster: bandwidth must be a number, got '1e9'"),
    Case("cluster-memory-under-a-byte", "api", lambda d: _from_speeds([1], memory_bytes=0.5),
         "device 'w0': memory_bytes must be at least 1 byte, got 0.5"),
    # --- sweep 13: write_dataset's arguments (all written in silence before)
    # a one-class dataset: nothing a classifier can learn, train refuses it afterwards
    Case("data-synth-one-label", "cli",
         ["data", "synth", "--out", "{d}/synth-one", "--n", "2", "--shape", "8,8,8", "--labels", "A"],
         "label set must name at least two classes, got ('A',)"),
    Case("write-dataset-labels-a-string", "api", _write_dataset(label_set="NCAD"),
         "label set must be a sequence of names, got 'NCAD'"),  # was the labels N, C, A, D
    Case("write-dataset-label-empty", "api", _write_dataset(label_set=("", "AD")),
         "label set must be non-empty names without repeats, got ('', 'AD')"),
    Case("write-dataset-n-fraction", "api", _write_dataset(n=2.5),  # was cut to 2
         "n must be a whole number >= 1, got 2.5"),
    Case("write-dataset-noise-nan", "api", _write_dataset(noise=NAN),
         "noise must be a finite number >= 0, got nan"),
    Case("write-dataset-fractions-nan", "api", _write_dataset(fractions=[NAN, 1]),
         "fractions must be finite numbers >= 0, got [nan, 1]"),  # was numpy's 'repeats may not'
    Case("write-dataset-negative-seed", "api", _write_dataset(seed=-1),
         "seed must be a whole number >= 0, got -1"),
    # named no flag: 'batch: size 1 cannot be split into 2 parts of at least 1'
    Case("bench-memory-batch-below-workers", "cli", ["bench", "memory", "--batch", "1"],
         "--batch 1 is smaller than the 2 workers: a batch split gives each at least one sample"),
    # the profile's model (plan's default --model) as a list: "unhashable type: 'list'" traceback
    Case("plan-profile-model-a-list", "cli", ["plan", "--profile", "{d}/profile-model-list.json",
                                              "--method", "even"],
         "profile-model-list.json: extra field 'model' must be a string, got ['vgg-cifar']"),
    Case("models-get-a-list", "api", lambda d: _models_get_name(["vgg-cifar"]),
         "unknown model ['vgg-cifar']; choose one of"),
    # named the planner's argument ('time_limit (seconds) must be finite'), not the flag
    Case("plan-time-limit-infinite", "cli", ["plan", "--speeds", "1,1", "--method", "exact",
                                             "--time-limit", "inf"],
         "--time-limit must be > 0 and finite, got inf"),
    # an empty --devices was read as none: the run trained on emulated devices in silence
    Case("train-devices-empty", "subprocess", SYNTH + ["--devices", ""],
         "argument --devices: expected comma-separated device strings, none empty, got ''"),
    Case("predict-devices-empty-entry", "subprocess",
         ["predict", "--model-dir", "{d}", "--devices", "a,,b"],
         "argument --devices: expected comma-separated device strings, none empty, got 'a,,b'"),
    # a damaged run file's batch or model_overrides: TypeError tracebacks in predict
    Case("predict-run-file-batch-null", "cli",
         ["predict", "--model-dir", "{d}/run-batch-null", "--data", "{d}/nope", "--out", "{d}/p.csv"],
         "run-batch-null/meshpar_run.json: malformed batch=None (a whole number >= 1)"),
    Case("predict-run-file-unknown-override", "cli",
         ["predict", "--model-dir", "{d}/run-unknown-override", "--data", "{d}/nope", "--out",
          "{d}/p.csv"],
         "run-unknown-override/meshpar_run.json: model 'resattnet3d-tiny' with model_overrides "
         "{'bogus': 1}: "),
    # ignored in silence: --data evaluates its own dataset (no phantoms), --only one-device
    # runs no uneven mesh
    Case("evaluate-n-with-data", "cli", ["evaluate", "--out", "{d}/ev-data-n", "--data",
                                         "{d}/one-class", "--labels", "NC,AD", "--n", "50"],
         "--n goes with phantom tasks; --data evaluates its own dataset, so this run would "
         "ignore it"),
    Case("evaluate-tasks-with-data", "cli", ["evaluate", "--out", "{d}/ev-data-t", "--data",
                                             "{d}/one-class", "--labels", "NC,AD", "--tasks",
                                             "smci-pmci"],
         "--tasks goes with phantom tasks"),
    Case("evaluate-speeds-with-only-one-device", "cli",
         ["evaluate", "--out", "{d}/ev-one-speeds", "--only", "one-device", "--speeds", "1,nan"],
         "--speeds goes with the uneven mesh; --only one-device runs without it"),
    # make_tf_dataset: a fraction was cut (8.5 -> 8, 2.5 passes -> 2), a string read as
    # its characters, a batch of 2.5 or a bad spacing was a TensorFlow error naming nothing
    Case("make-tf-dataset-batch-fraction", "api", _tf_dataset(batch_size=2.5),
         "batch_size must be a whole number >= 1, got 2.5"),
    Case("make-tf-dataset-batch-true", "api", _tf_dataset(batch_size=True),
         "batch_size must be a whole number >= 1, got True"),
    Case("make-tf-dataset-shape-fraction", "api", _tf_dataset(shape=(16.5, 16, 16)),
         "shape must be three positive sizes, got (16.5, 16, 16)"),
    Case("make-tf-dataset-labels-a-string", "api", _tf_dataset(label_set="NCAD"),
         "label set must be non-empty names without repeats, got 'NCAD'"),
    Case("make-tf-dataset-repeat-fraction", "api", _tf_dataset(repeat=2.5),
         "repeat must be True, False or a positive int, got 2.5"),
    Case("make-tf-dataset-parallel-calls-zero", "api", _tf_dataset(num_parallel_calls=0),
         "num_parallel_calls must be a whole number >= 1, got 0"),
    Case("make-tf-dataset-spacing-nan", "api", _tf_dataset(spacing=NAN),
         "spacing must be finite voxel sizes > 0 (mm), got nan"),
    # accepted by make_estimator, refused by the first training step
    Case("make-estimator-unknown-optimizer", "api",
         lambda d: _make_estimator(d, optimizer="bogus"),
         "unknown optimizer 'bogus'; choose one of adam, momentum, sgd"),
    Case("make-estimator-optimizer-a-number", "api", lambda d: _make_estimator(d, optimizer=5),
         "optimizer must be 'adam', 'momentum', 'sgd', an optimizer or a factory of one, got 5",
         error=TypeError),
    # taken by the estimator; TensorFlow's traceback at the first checkpoint / the protobuf's
    # 'Value out of range: 1000000000000'
    Case("make-estimator-model-dir-under-a-file", "api",
         lambda d: _make_estimator(d, model_dir=str(Path(d) / "plan.json" / "run")),
         "plan.json/run: {d}/plan.json is a file, not a directory"),
    Case("make-estimator-threads-huge", "api", lambda d: _make_estimator(d, threads=10 ** 12),
         "threads must be at most 2**31 - 1 (a TF session's int32), got 1000000000000"),
    # planners.plan(shapes=): a fraction was cut (1.5x2 planned as 1x2)
    Case("plan-api-shape-fraction", "api", _plan_api(shapes=[(1.5, 2)]),
         "mesh shape must be (rows, cols) of integers, got (1.5, 2)"),
    # HeterogeneousMeshImpl: a repeated axis made a mesh with two axes 'a'; a size of 2.5
    # or a rule without ':' was Mesh-TF's 'bad input to _parse_string_to_list_of_pairs ...';
    # layout None a TypeError ('NoneType' object is not iterable); from_plan of a path an
    # AttributeError
    Case("impl-mesh-axis-twice", "api", _impl("a:1;a:2", "", n=2),
         "mesh shape: axis names must differ, got Shape[a=1, a=2]"),
    Case("impl-mesh-size-fraction", "api", _impl("model:2.5", n=2),
         "mesh shape: bad shape 'model:2.5', expected axis:size pairs such as batch:2;model:2"),
    Case("impl-layout-rule-without-axis", "api", _impl(layout="f"),
         "layout: bad rule in 'f', expected dimension:axis rules"),
    Case("impl-layout-none", "api", _impl(layout=None),
         "layout must be a layout string such as 'batch:batch;f:model'", error=TypeError),
    Case("impl-from-plan-not-a-plan", "api", lambda d: _impl_from_plan_of({"devices": ["a"]}),
         "plan must be a Plan or the path of a plan file, got {'devices': ['a']}",
         error=TypeError),
    # a plan or a device profile given as the TF cluster file: "job 'method' must list
    # 'host:port' addresses", as if it were a cluster file with odd jobs
    Case("profile-cluster-is-a-plan", "cli", ["profile", "--cluster", "{d}/plan.json"],
         "{d}/plan.json is a plan (`meshpar plan --out`), not a TF cluster file"),
    Case("train-cluster-is-a-profile", "cli",
         SYNTH + ["--model", "resattnet3d-tiny", "--cluster", "{d}/profile.json", "--speeds", "1,1"],
         "{d}/profile.json is a device profile (`meshpar profile --out`), not a TF cluster file"),
    # save_json_atomic (Plan.save, ClusterSpec.save): a directory was os.replace's
    # '[Errno 21] Is a directory: <temporary file>'; "" wrote its temporary file beside the
    # working directory; a path under a file said its directory "does not exist"
    Case("plan-save-to-a-directory", "api", lambda d: _plan(d).save(d),
         "{d} is a directory; give a file name", error=IsADirectoryError),
    Case("plan-save-empty-path", "api", lambda d: _plan(d).save(""),
         "expected a file name to write, got ''"),
    Case("cluster-save-under-a-file", "api",
         lambda d: _from_speeds([1]).save(Path(d) / "plan.json" / "p.json"),
         "p.json: {d}/plan.json is a file, so no file can be made in it", error=NotADirectoryError),
    Case("plan-out-under-a-file", "cli",
         ["plan", "--speeds", "1,1", "--method", "even", "--out", "{d}/plan.json/p.json"],
         "{d}/plan.json/p.json: {d}/plan.json is a file, so no file can be made in it"),
    # a file of the user's at --trace-out was written over once the training had run
    Case("train-trace-out-over-another-file", "cli",
         SYNTH + ["--model", "resattnet3d-tiny", "--trace-step", "1", "--trace-out",
                  "{d}/out-foreign/train.json"],
         "{d}/out-foreign/train.json exists and is not a Chrome trace; it is kept (remove it, "
         "or give another --trace-out)"),
    # a device that is not a string: "'int' object has no attribute 'split'" at the lowering
    Case("impl-device-a-number", "api", _impl_on([1, 2]),
         "devices[0] is 1; devices are device strings (e.g. '/cpu:0', or '' for an emulated"),
    # --worker-timeout inf was an OverflowError traceback; 1e-9 s became 0 ms, TF's "no
    # timeout"; refused before the (here dead) workers are reached
    Case("train-worker-timeout-infinite", "cli",
         SYNTH + ["--model", "resattnet3d-tiny", "--cluster", "{d}/tf-dead.json", "--speeds", "1,1",
                  "--worker-timeout", "inf"],
         "worker timeout must be > 0 seconds, from 0.001 (TF counts milliseconds)"),
    Case("train-worker-timeout-under-a-ms", "cli",
         SYNTH + ["--model", "resattnet3d-tiny", "--cluster", "{d}/tf-dead.json", "--speeds", "1,1",
                  "--worker-timeout", "1e-9"],
         "got 1e-09"),
    # a model-step profile's calibration edited by hand: a list was "list indices must be
    # integers" (TypeError traceback); a NaN overhead planned in silence (NaN seconds)
    Case("plan-profile-overhead-a-list", "cli",
         ["plan", "--profile", "{d}/profile-overhead-list.json", "--method", "even"],
         "profile-overhead-list.json: extra field 'split_overhead_flops' must be an object of "
         "numbers, got [1]"),
    Case("plan-profile-overhead-nan", "cli",
         ["plan", "--profile", "{d}/profile-overhead-nan.json", "--method", "even"],
         "extra field 'split_overhead_flops'['batch'] must be a finite number >= 0, got nan"),
    # ClusterSpec.with_memory: a string's characters were the budgets ("12": 1 and 2 bytes)
    Case("cluster-with-memory-a-string", "api",
         lambda d: _from_speeds([1, 1]).with_memory("12"),
         "memory: expected a number or a list of numbers, got '12'"),
    # named the estimator's params ("params['warmup_steps'] must be an integer >= 0"),
    # not the flag the user gave
    Case("train-lr-warmup-steps-negative", "cli", SYNTH + ["--lr-warmup-steps", "-1"],
         "--lr-warmup-steps must be >= 0, got -1"),
    Case("train-lr-decay-steps-zero", "cli",
         SYNTH + ["--lr-schedule", "step", "--lr-decay-steps", "0"],
         "--lr-decay-steps must be >= 1, got 0"),
    # a TF cluster file given as the plan: "missing field 'method'"
    Case("train-plan-is-a-cluster-file", "cli",
         SYNTH + ["--plan", "{d}/tf-dead.json", "--model", "vgg-cifar-small"],
         "{d}/tf-dead.json is a TF cluster file (worker addresses), not a plan"),
    # a NiftiDataset passed with a shape (or labels, spacing, ...) of its own: ignored in
    # silence, the batches came at the dataset's 16^3
    Case("make-tf-dataset-shape-with-a-dataset", "api", _tf_dataset_of_dataset(shape=(32, 32, 32)),
         "shape: the NiftiDataset passed has its own; build it with them"),
    # noise 1e300 wrote subjects of inf voxels in silence; no orientation was numpy's
    # 'a cannot be empty unless no samples are taken'
    Case("write-dataset-noise-huge", "api", _write_dataset(noise=1e300),
         "noise must be at most 100 (relative to white matter; default 0.04), got 1e+300"),
    Case("write-dataset-no-orientation", "api", _write_dataset(orientations=[]),
         "orientations must be a list of axis codes such as ['RAS', 'LPS'], got []"),
    # a --model-dir under a file: '[Errno 20] Not a directory: ...', naming no flag
    Case("train-model-dir-under-a-file", "cli", SYNTH + ["--model-dir", "{d}/plan.json/run"],
         "--model-dir {d}/plan.json/run: {d}/plan.json is a file, so no directory can be made "
         "under it"),
    # predict --out under a file: '[Errno 17] File exists' after the whole prediction
    Case("predict-out-under-a-file", "cli",
         ["predict", "--model-dir", "{d}/run-bad-best", "--data", "{d}/nan", "--out",
          "{d}/plan.json/p.csv"],
         "--out {d}/plan.json/p.csv: {d}/plan.json is a file, so the CSV cannot be written"),
    # --steps with --skip-training was ignored in silence (the demo never trains)
    Case("demo-steps-with-skip-training", "cli", ["demo", "--skip-training", "--steps", "5"],
         "--steps goes with the training part; --skip-training leaves it out"),
    # 9 subjects passed the check (>= 8) and failed in train after parts 1 and 2 had run:
    # 'meshpar train: error: --batch 8 is larger than the 7 training subjects'
    Case("demo-subjects-fewer-than-a-batch", "cli", ["demo", "--subjects", "9"],
         "--subjects must be >= 10, got 9"),
    # a model named twice (or by its alias) was benchmarked twice, hours each, and its
    # profile kept once
    Case("bench-train-model-twice", "cli", ["bench", "train", "--models", "vgg-cifar,vgg-cifar"],
         "--models names vgg-cifar twice; each model is benchmarked once"),
    Case("bench-memory-model-by-its-alias", "cli",
         ["bench", "memory", "--models", "resattnet3d,resattnet3d-full"],
         "--models names resattnet3d-full twice (as resattnet3d)"),
    # --verify-rounds without --verify was ignored in silence (no verified row)
    Case("bench-train-verify-rounds-without-verify", "cli",
         ["bench", "train", "--verify-rounds", "3"], "--verify-rounds goes with --verify K"),
    # a task named twice was run once in silence (--seeds and --test-folds refuse repeats)
    Case("evaluate-task-twice", "cli", ["evaluate", "--out", "{d}/ev-tasks", "--tasks",
                                        "ad-nc,smci-pmci,ad-nc"],
         "--tasks repeats a task: 'ad-nc,smci-pmci,ad-nc'"),
    # --channels 2 on the one-channel phantoms failed in the first train run, after
    # every cohort's phantoms were written
    Case("evaluate-train-channels-on-phantoms", "cli",
         ["evaluate", "--out", "{d}/ev-channels", "--train-args=--channels 2"],
         "--channels 2: the phantoms have one channel; more need --data"),
    # TensorFlow takes graph seeds modulo 2**31 - 1: --seed 2147483647 trained from the
    # weights of --seed 0 (its data split differed), in silence
    Case("train-seed-past-tensorflows", "subprocess", SYNTH + ["--seed", "2147483647"],
         "must be at most 2147483646, got 2147483647: TensorFlow takes seeds modulo "
         "2**31 - 1, so it would be seed 0"),
    Case("evaluate-seed-past-tensorflows", "cli",
         ["evaluate", "--out", "{d}/ev-seed", "--seeds", "1,2147483648"],
         "--seeds: must be at most 2147483646, got 2147483648"),
    Case("run-config-seed-past-tensorflows", "api", _run_config(seed=2**31),
         "seed must be at most 2147483646, got 2147483648"),
    # an extension matplotlib has no writer for: "Format 'xyz' is not supported" once the
    # plan was made (the GA may take minutes)
    Case("plan-plot-unknown-format", "cli",
         ["plan", "--speeds", "1,0.5", "--plot", "{d}/plan.xyz"],
         "--plot {d}/plan.xyz: matplotlib writes no 'xyz' image; give a name ending in .png"),
    # --quick with --model was ignored in silence: every batch up to --batch was timed
    Case("profile-quick-with-model", "cli",
         ["profile", "--cluster", "{d}/live-worker.json", "--model", "vgg-cifar-small",
          "--quick"], "--quick picks two small conv3d sizes; --model times batches"),
    # --no-plot without --out was ignored in silence (nothing is written without --out)
    Case("bench-hetero-no-plot-without-out", "cli", ["bench", "hetero", "--quick", "--no-plot"],
         "--no-plot goes with --out (where hetero.png would be written)"),
    # trained to the end, then 'keep-best: no validation subjects; keeping the last
    # checkpoint' on stderr, exit 0
    Case("train-keep-best-without-validation", "cli",
         SYNTH + TRAIN + ["--keep-best", "--checkpoint-every", "1"],
         "--keep-best scores each checkpoint on the validation subjects; --val-fraction 0 "
         "holds none out"),
    # a labels.csv with two 'label' columns: the first was read, in silence
    Case("data-check-label-column-twice", "cli", ["data", "check", "{d}/label-column-twice"],
         "labels.csv: column 'label' appears 2 times in the header; give it once"),
    # --elastic alone measures no speeds: the drift flags were ignored in silence
    Case("train-elastic-with-a-drift-flag", "cli",
         SYNTH + ["--cluster", "{d}/live-worker.json", "--elastic", "--rebalance-threshold",
                  "0.2"],
         "--rebalance-threshold goes with --rebalance (when measured speeds drift); "
         "--elastic alone re-plans only when a worker is lost or comes back"),
    # 10 phantoms in 2 folds leave 3 to train on: train refused batch 8 only after every
    # cohort was written ('--batch 8 is larger than the 3 training subjects')
    Case("evaluate-fewer-training-phantoms-than-a-batch", "cli",
         ["evaluate", "--out", "{d}/ev-small", "--n", "10", "--folds", "2", "--seeds", "0",
          "--tasks", "ad-nc"],
         "--n 10: task ad-nc, seed 0, fold 0 of 2 leaves 3 training phantoms, fewer than the "
         "batch 8"),
    # the results directory given as a dataset: the phantoms and runs went in among its
    # subjects (evaluate --data X --out X too)
    Case("evaluate-out-is-a-dataset", "cli", ["evaluate", "--out", "{d}/one-class"],
         "--out {d}/one-class is a dataset (it holds labels.csv); give a directory of its own"),
    # 2 subjects over 3 labels: MCI had none, written in silence (a class with no subject)
    Case("data-synth-fewer-subjects-than-labels", "cli",
         ["data", "synth", "--out", "{d}/synth-2-of-3", "--n", "2", "--shape", "8,8,8",
          "--labels", "NC,AD,MCI"],
         "n=2 subjects cannot share 3 labels equally: MCI would have none"),
    # --- bad-input sweep 15
    # a cadence past --steps never takes effect (was accepted in silence, as a
    # --trace-step past the last step is not)
    Case("train-checkpoint-every-past-the-steps", "cli",
         SYNTH + TRAIN + ["--checkpoint-every", "5", "--steps", "3"],
         "--checkpoint-every 5 is past --steps 3: the only checkpoint is the last one "
         "(step 3), which every run writes, so this run would ignore it"),
    Case("train-worker-times-every-past-the-steps", "cli",
         SYNTH + TRAIN + ["--worker-times-every", "4", "--steps", "3"],
         "--worker-times-every 4 is past --steps 3: no step would be traced"),
    # trained on the cluster's workers, predicted on this machine: reported as one
    # device and as the emulated uneven mesh, neither of which it was
    Case("evaluate-train-args-on-a-cluster", "cli",
         ["evaluate", "--out", "{d}/ev-cluster", "--train-args=--cluster {d}/tf-dead.json"],
         "--train-args may not set --cluster: evaluate trains and predicts every run on "
         "this machine"),
    Case("evaluate-train-args-on-a-cluster-abbreviated", "cli",
         ["evaluate", "--out", "{d}/ev-cluster", "--only", "uneven-mesh",
          "--train-args=--clus {d}/tf-dead.json --steps 2"],
         "--train-args may not set --cluster"),
    # --devices this process cannot place on: a worker task's device was TF's 'Cannot
    # assign a device' traceback; a GPU the machine lacks ran on its CPU in silence
    Case("train-devices-of-a-worker-task", "cli",
         SYNTH + TRAIN + ["--speeds", "1,1", "--devices",
                          "/job:worker/task:0/device:CPU:0,/cpu:0"],
         "--devices: /job:worker/task:0/device:CPU:0 names a worker task's device; slices go "
         "to workers with --cluster"),
    Case("train-devices-not-on-this-machine", "cli",
         SYNTH + TRAIN + ["--speeds", "1,1", "--devices", "/cpu:0,/cpu:7"],
         "--devices: /cpu:7 is not a device of this machine (it has CPU:0"),
    Case("train-devices-not-a-device", "cli",
         SYNTH + TRAIN + ["--speeds", "1,1", "--devices", "a,b"],
         "--devices: 'a' is not a device (Unknown attribute 'a'"),
    # a misspelt kind of profile ('model step') was read as a conv3d layer profile: the
    # plan priced the model's steps at kernel speeds, in silence
    Case("cluster-profile-work-misspelt", "api",
         lambda d: _cluster_from(extra={"work": "model step", "model": "vgg-cifar-small"}),
         "extra field 'work' must be 'model-step' (profile --model) or 'layer' (the conv3d "
         "kernel), got 'model step'"),
    # a schedule that cannot take effect within --steps (as cosine's warm-up past it is
    # refused): the step schedule's first decay past the last step ran a constant rate,
    # a constant schedule's warm-up past it never reached --lr, in silence
    Case("train-step-schedule-decays-past-the-steps", "cli",
         SYNTH + TRAIN + ["--steps", "10", "--lr-schedule", "step", "--lr-decay-steps", "10"],
         "step schedule: the first decay, after 1 warm-up and 10 decay steps, is not before "
         "the total steps (10): the rate would never decay"),
    Case("train-constant-schedule-warm-up-past-the-steps", "cli",
         SYNTH + TRAIN + ["--steps", "10", "--lr-schedule", "constant", "--lr-warmup-steps",
                          "20"],
         "constant schedule: total steps (10) are fewer than the warm-up steps (20): the rate "
         "would never reach its peak"),
    Case("learning-rate-step-decay-past-the-total", "api",
         lambda d: _learning_rate("step", 0.1, 0, warmup_steps=0, total_steps=5, decay_steps=5),
         "the rate would never decay"),
    # a label from bytes that are not UTF-8: the subjects and phantoms.json were written
    # before labels.csv failed ("'utf-8' codec can't encode character '\udcff'")
    Case("data-synth-label-not-utf8", "subprocess",
         ["data", "synth", "--out", "{d}/synth-not-utf8", "--n", "2", "--shape", "8,8,8",
          "--labels", "\udcffA,AD"],
         "argument --labels: class name '\\udcffA' is not UTF-8 text"),
    Case("write-dataset-label-not-utf8", "api", _write_dataset(label_set=("\udcffA", "AD")),
         "label '\\udcffA' is not UTF-8 text (labels.csv is UTF-8)"),
    # a model directory of non-UTF-8 bytes: TF's "'utf-8' codec can't encode character
    # '\udcff'" once training (after the phantoms) or prediction began
    Case("train-model-dir-not-utf8", "cli", SYNTH + TRAIN + ["--model-dir", "{d}/run-\udcff"],
         "is not UTF-8 text (bytes of another encoding); TensorFlow keeps its checkpoints "
         "under UTF-8 names"),
    Case("predict-model-dir-not-utf8", "cli",
         ["predict", "--model-dir", "{d}/run-\udcff", "--data", "{d}/nan", "--out",
          "{d}/p-utf8.csv"],
         "is not UTF-8 text (bytes of another encoding); TensorFlow keeps its checkpoints"),
    Case("run-config-model-dir-not-utf8", "api",
         lambda d: _run_config_in(str(Path(d) / "run-\udcff")),
         "is not UTF-8 text (bytes of another encoding)"),
    # every run wrote its Chrome trace to the one file, over the one before
    Case("evaluate-train-args-one-trace-file", "cli",
         ["evaluate", "--out", "{d}/ev-trace", "--train-args=--trace-step 1 --trace-out "
          "{d}/trace.json"],
         "--train-args may not set --trace-out: every run would write its trace to "
         "{d}/trace.json, over the one before"),
    # a model-step profile whose whole-batch step cannot fit in the workers of this host:
    # batch 10**7 of resattnet3d-tiny ran four minutes on one worker before the
    # out-of-memory killer ended it (UnavailableError traceback); bench train started
    # its workers first
    Case("profile-model-batch-beyond-the-host", "cli",
         ["profile", "--cluster", "{d}/tf-dead.json", "--model", "resattnet3d-tiny",
          "--batch", str(10 ** 12)],
         f"--batch {10 ** 12}: one training step of resattnet3d-tiny at batch {10 ** 12} "
         "needs at least"),
    Case("bench-train-batch-beyond-the-host", "cli",
         ["bench", "train", "--models", "resattnet3d-tiny", "--batch", str(10 ** 12)],
         "on a worker (the cost model's count, less its largest overstatement), more than "
         "the 2 workers on this host can hold"),
    Case("profile-cluster-workers-batch-beyond-the-host", "api",
         lambda d: _profile_workers(["127.0.0.1:1"], model="resattnet3d-tiny", batch=10 ** 12),
         "more than the worker on this host can hold"),
    # one subject, or the whole set, that cannot fit: the out-of-memory killer ended the
    # process without a word, or a full disk stopped it with a traceback, subjects later
    Case("data-synth-subject-beyond-the-memory", "cli",
         ["data", "synth", "--out", "{d}/synth-huge", "--n", "2", "--shape",
          "100000,100000,100000"],
         "a 100000x100000x100000 subject needs about 42.6 PiB of memory while it is drawn"),
    Case("data-synth-set-beyond-the-disk", "cli",
         ["data", "synth", "--out", "{d}/synth-many", "--n", str(10 ** 13), "--shape", "8,8,8"],
         f"{10 ** 13} subjects of 8x8x8 need about 21.3 PiB on disk (float32, 4 bytes a "
         "voxel), more than the"),
    Case("write-dataset-set-beyond-the-disk", "api", _write_dataset(n=10 ** 13),
         "subjects of 8x8x8 need about 21.3 PiB on disk"),
    # --force replaced any file with the CSV: `--out plan.json` for `--out plan.csv`
    # lost the plan (evaluate passes --force to every predict)
    Case("predict-force-over-a-plan", "cli",
         ["predict", "--model-dir", "{d}", "--data", "{d}/nan", "--out", "{d}/plan.json",
          "--force"],
         "{d}/plan.json exists and is not a predictions CSV (`meshpar predict --out`); it is "
         "kept (remove it, or give another --out)"),
    # --force replaced a real dataset's labels.csv and its subjects named like phantoms
    Case("write-dataset-force-over-a-users-dataset", "api", _synth_over_a_dataset,
         "users-dataset holds labels.csv that `meshpar data synth` did not write (no "
         "phantoms.json of data synth beside it): --force replaces only an earlier synthetic "
         "dataset's files, so these are kept", error=FileExistsError),
    # a population of 10**8 grew to 22 GiB in 100 s of its first evaluation (no time
    # limit stops that), on its way to the out-of-memory killer
    Case("plan-population-huge", "cli",
         ["plan", "--speeds", "1,0.5", "--model", "resattnet3d-tiny", "--population",
          str(10 ** 8)],
         f"--population must be at most 100000, got {10 ** 8}: every individual is held and "
         "evaluated each generation"),
    Case("plan-api-population-huge", "api", lambda d: _ga_plan(population=10 ** 6),
         "population must be at most 100000, got 1000000"),
    # train's own refusal, after parts 1 and 2 of the demo had run
    Case("demo-subjects-beyond-the-disk", "cli", ["demo", "--subjects", str(10 ** 13)],
         f"{10 ** 13} subjects of 32x32x32 need about"),
    # a hand-edited run file: predict died with an IndexError traceback (3 labels for
    # a 2-class model), read ['NC', 'NC'] as a label set, or said "could not convert
    # string to float: '1mm'" without naming the file
    Case("run-file-labels-of-another-count", "api",
         _run_file("run-three-labels", labels=["NC", "AD", "MCI"]),
         "labels ['NC', 'AD', 'MCI'] name 3 classes, but resattnet3d-tiny has 2"),
    Case("run-file-labels-repeated", "api", _run_file("run-labels-twice", labels=["NC", "NC"]),
         "meshpar_run.json: malformed labels=['NC', 'NC'] (class names, each once)"),
    Case("run-file-spacing-text", "api", _run_file("run-spacing-text", spacing="1mm"),
         "meshpar_run.json: malformed spacing='1mm' (null, or a voxel size in mm > 0"),
    Case("run-file-spacing-negative", "api", _run_file("run-spacing-neg", spacing=[-1, 1, 1]),
         "meshpar_run.json: malformed spacing=[-1, 1, 1]"),
    # every strategy failed in turn (train's refusal of its phantoms, or the workers'
    # memory) once the workers had started
    Case("bench-memory-batch-beyond-the-host", "cli",
         ["bench", "memory", "--models", "resattnet3d-tiny", "--batch", str(10 ** 12)],
         f"--batch {10 ** 12}: one training step of resattnet3d-tiny at batch {10 ** 12} "
         "needs at least"),
    # one server under two names: both tasks went to the worker at port 2222
    Case("cluster-file-one-server-two-names", "api",
         _cluster_file("loopback-twice.json", {"worker": ["localhost:2222", "127.0.0.1:2222"]}),
         "127.0.0.1:2222 is listed twice (as localhost:2222) (worker task 0 and worker task 1)"),
    Case("cluster-file-one-server-by-this-hosts-name", "api",
         lambda d: _cluster_file("hostname-twice.json", {"worker": [
             "localhost:2222", __import__("socket").gethostname() + ":2222"]})(d),
         ":2222 is listed twice (as localhost:2222) (worker task 0 and worker task 1)"),
    Case("cluster-file-port-with-leading-zero", "api",
         _cluster_file("port-zero-twice.json", {"worker": ["host-a:2222", "HOST-A:02222"]}),
         "HOST-A:02222 is listed twice (as host-a:2222)"),
    # '²' passed str.isdigit and died in int() ("invalid literal for int()"); full-width
    # digits were taken for port 22
    Case("cluster-file-port-superscript", "api",
         _cluster_file("port-superscript.json", {"worker": ["localhost:\u00b2"]}),
         "'localhost:\u00b2' needs a port in 1..65535"),
    Case("cluster-file-port-full-width", "api",
         _cluster_file("port-full-width.json", {"worker": ["localhost:\uff12\uff12"]}),
         "needs a port in 1..65535"),
    # sweep 16. Python's int() and float() read '1_0' as 10 and other scripts' digits
    # (full-width, Arabic-Indic) as ASCII ones: each was taken in silence
    Case("plan-batch-underscore", "subprocess", ["plan", "--speeds", "1,1", "--batch", "1_0"],
         "argument --batch: invalid int value: '1_0'"),
    Case("plan-batch-full-width", "subprocess", ["plan", "--speeds", "1,1", "--batch", "\uff18"],
         "argument --batch: invalid int value: '\uff18'"),
    Case("plan-time-limit-underscore", "subprocess",
         ["plan", "--speeds", "1,1", "--method", "exact", "--time-limit", "1_0"],
         "argument --time-limit: invalid float value: '1_0'"),
    Case("plan-speeds-underscore", "cli", ["plan", "--speeds", "1_0,1"],
         "--speeds: '1_0' is not a number"),
    Case("plan-memory-mib-arabic-indic", "cli",
         ["plan", "--speeds", "1,1", "--memory-mib", "\u0666\u0664"],
         "--memory-mib: '\u0666\u0664' is not a number"),
    Case("plan-mesh-underscore", "cli", ["plan", "--speeds", "1,1", "--mesh", "model:0_2"],
         "--mesh: bad shape 'model:0_2', expected e.g. batch:2;model:2"),
    # the planner's own words named neither flag: "mesh shape 4x1: 4 batch rows but batch
    # is only 2"
    Case("plan-mesh-more-rows-than-batch", "cli",
         ["plan", "--speeds", "1,1,1,1", "--batch", "2", "--mesh", "batch:4", "--method", "even"],
         "--mesh batch:4 has 4 batch rows but --batch is 2: each row needs at least one sample"),
    Case("mesh-shape-full-width", "api", lambda d: _parse_mesh_shape("batch:1;model:\uff12"),
         "mesh shape: bad shape 'batch:1;model:\uff12'"),
    Case("synth-shape-underscore", "subprocess",
         ["data", "synth", "--out", "{d}/synth-underscore", "--n", "2", "--shape", "1_6,16,16"],
         "argument --shape: expected comma-separated integers, got '1_6,16,16'"),
    Case("synth-ad-fraction-full-width", "subprocess",
         ["data", "synth", "--out", "{d}/synth-full-width", "--n", "2", "--ad-fraction",
          "\uff10.\uff15"],
         "argument --ad-fraction: expected a number in [0, 1], got '\uff10.\uff15'"),
    Case("train-class-weights-underscore", "cli",
         SYNTH + ["--model", "resattnet3d-tiny", "--batch", "2", "--loss",
                  "weighted_cross_entropy", "--class-weights", "1_0,1"],
         "--class-weights: expected 'balanced' or numbers, got '1_0,1'"),
    Case("evaluate-seeds-underscore", "subprocess",
         ["evaluate", "--out", "{d}/eval-underscore", "--seeds", "1_0", "--folds", "1"],
         "argument --seeds: expected comma-separated integers, got '1_0'"),
    # a hand-edited plan naming one worker device twice: two slices on one device,
    # planned as two devices' speed, taken as written
    Case("plan-device-twice", "api",
         lambda d: _plan_of(mesh_shape=(("model", 2),), devices=(
             "/job:worker/task:1/device:GPU:0", "/job:worker/replica:0/task:1/device:gpu:0")),
         "device /job:worker/replica:0/task:1/device:gpu:0 of pnum 1 is pnum 0's"),
    # TensorFlow looks checkpoints up by glob pattern: under run[1] it found none of the
    # run's own (the summary said 0 steps; a resumed run failed, 'not a valid checkpoint')
    Case("train-model-dir-glob", "cli",
         SYNTH + ["--model", "resattnet3d-tiny", "--batch", "2", "--model-dir", "{d}/run[1]"],
         "--model-dir {d}/run[1] holds '[', which TensorFlow reads as a glob pattern"),
    Case("predict-model-dir-glob", "cli",
         ["predict", "--model-dir", "{d}/run*", "--data", "{d}/corrupt", "--out", "{d}/glob.csv"],
         "--model-dir {d}/run* holds '*', which TensorFlow reads as a glob pattern"),
    Case("predict-checkpoint-glob", "cli",
         ["predict", "--model-dir", "{d}/run-bad-best", "--checkpoint", "model.ckpt-?",
          "--data", "{d}/corrupt", "--out", "{d}/glob.csv"],
         "--checkpoint model.ckpt-? holds '?', which TensorFlow reads as a glob pattern"),
    Case("evaluate-out-glob", "cli", ["evaluate", "--out", "{d}/acc[1]", "--folds", "1"],
         "--out {d}/acc[1] holds '[', which TensorFlow reads as a glob pattern"),
    Case("estimator-model-dir-glob", "api", lambda d: _make_estimator_in(Path(d) / "m\\1"),
         "model_dir {d}/m\\1 holds '\\\\', which TensorFlow reads as a glob pattern"),
    # a chief (TF: a worker that also coordinates) or a ps was left idle in silence
    Case("cluster-file-chief", "api",
         _cluster_file("chief.json", {"chief": ["h0:2222"], "worker": ["h1:2222"]}),
         "job 'chief' (h0:2222) would sit idle: meshpar places every slice, variables too, "
         "on a 'worker' task, and the process that runs the mesh coordinates it (no chief)"),
    Case("cluster-file-ps", "api",
         _cluster_file("ps.json", {"cluster": {"worker": ["h1:2222"], "ps": ["h2:2222"]}}),
         "job 'ps' (h2:2222) would sit idle"),
    # sweep 17: a path with a line break cut the one-line error naming it ('error: runs')
    Case("plan-out-line-break", "subprocess", ["plan", "--speeds", "1,1", "--out", "runs\nold/plan.json"],
         "argument --out: expected a path on one line, got 'runs\\nold/plan.json'"),
    Case("data-check-line-break", "subprocess", ["data", "check", "{d}/da\rta"],
         "argument directory: expected a path on one line"),
    # sweep 17: a run file that contradicts the network it names (edited, or a network of
    # one's own changed since) predicted volumes of another size with the checkpoint
    Case("run-file-input-shape-edited", "api", _run_file("run-shape", input_shape=[8, 8, 8, 1]),
         "the run trained resattnet3d-tiny on input_shape [8, 8, 8, 1], channels 1, but it "
         "builds with input_shape [16, 16, 16, 1] now"),
    Case("run-file-channels-edited", "api", _run_file("run-channels", channels=2),
         "input_shape [16, 16, 16, 1], channels 2, but it builds with"),
    # sweep 17: an address with a scheme was dialled as given: 'cannot reach worker 0'
    Case("cluster-file-address-with-scheme", "api",
         _cluster_file("scheme.json", {"worker": ["grpc://h1:2222"]}),
         "job 'worker': 'grpc://h1:2222' is not 'host:port' (no scheme or path: h1:2222)"),
    Case("cluster-file-address-with-path", "api",
         _cluster_file("path.json", {"worker": ["h1/x:2222"]}),
         "'h1/x:2222' is not 'host:port' (no scheme or path: h1:2222)"),
    # sweep 17: a class name with a line break was written into labels.csv, and data
    # check's counts ('(N\nC 2, AD 2)') and every message naming it broke over two lines
    Case("data-synth-label-line-break", "subprocess",
         ["data", "synth", "--out", "{d}/synth-nl", "--n", "4", "--shape", "8,8,8",
          "--labels", "N\nC,AD"],
         "argument --labels: class name 'N\\nC' holds a control character"),
    Case("write-dataset-label-tab", "api", _write_dataset(label_set=("N\tC", "AD")),
         "label 'N\\tC' holds a control character"),
]


def _serve(cluster, job, index):
    from meshpar.runtime.worker import serve

    serve(cluster, job, index, announce=None)
