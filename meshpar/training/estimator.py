"""Train and evaluate meshpar models with ``tf.estimator`` on a (heterogeneous) mesh.

:func:`build_model_fn` returns a ``model_fn`` that, in TF1 graph mode,

1. builds the model as a Mesh-TensorFlow graph on one mesh,
2. adds the loss (softmax cross-entropy unless ``params`` choose another)
   and, in training, the race-free optimizer step (:mod:`meshpar.core.optim`)
   with the recipe's learning-rate schedule, weight decay and gradient
   clipping (:mod:`meshpar.training.recipe`), plus the model's own updates
   (batch-norm moving averages), ordered behind the same barrier,
3. lowers it with ``mtf.Lowering`` onto a :class:`~meshpar.HeterogeneousMeshImpl`
   made from a :class:`~meshpar.planning.plan.Plan` or from explicit mesh arguments,
4. checkpoints through the *master* variables: slices are copied to the
   masters before each save (``mtf.MtfCheckpointSaverListener``) and from the
   masters after each restore (``mtf.MtfRestoreHook``). Slice variables are
   never saved, so a checkpoint written under one mesh or plan restores under
   any other.

Evaluation reports accuracy and, for two classes, AUC, sensitivity (recall of
class 1) and specificity (recall of class 0), all ``tf.compat.v1.metrics``,
plus any ``params["metrics"]``; training writes ``loss``, ``accuracy`` (of
the batch) and ``learning_rate`` summaries for TensorBoard.

The estimator's ``params`` (or ``build_model_fn(params=...)`` defaults) pick
the recipe; see :class:`meshpar.training.recipe.Recipe` for the keys.

Example
-------
>>> est = make_estimator("resattnet3d-small", "/tmp/run", mesh_shape="model:2",
...                      devices=["", ""], split_weights={"model": [3, 1]})  # doctest: +SKIP
>>> est.train(input_fn, max_steps=100)                                       # doctest: +SKIP
>>> est = make_estimator("resattnet3d-small", "/tmp/run2", params={           # doctest: +SKIP
...     "loss": "focal", "lr_schedule": "cosine", "warmup_steps": 10, "total_steps": 100,
...     "weight_decay": 1e-4, "clip_norm": 1.0})
"""
from __future__ import annotations

import os
import time
from typing import Callable, Mapping, Optional, Sequence, Union

import meshpar  # noqa: F401  (installs the mesh_tensorflow import shim)
import mesh_tensorflow as mtf
import tensorflow.compat.v1 as tf

from meshpar import models
from meshpar.core import optim
from meshpar.core.splits import integer_at_least, number_above, true_or_false
from meshpar.training import staging
from meshpar.training.mesh_spec import MeshSpec, as_spec, chosen_mesh, default_layout
from meshpar.training.recipe import Recipe
from meshpar.training.run import refuse_pattern_path, unfound_checkpoints

tf_estimator = tf.estimator

__all__ = ["MeshSpec", "build_model_fn", "check_even_splits", "make_estimator", "run_config", "default_layout",
           "LossHistoryHook", "LOSS_TENSOR_NAME"]

LOSS_TENSOR_NAME = "meshpar_loss"
_as_spec = as_spec  # the name tests and notebooks used


def build_model_fn(model, plan=None, *, mesh: Optional[MeshSpec] = None,
                   mesh_shape: Optional[str] = None, layout: Optional[str] = None,
                   devices: Optional[Sequence[str]] = None,
                   split_weights: Optional[Mapping] = None,
                   dim_split_weights: Optional[Mapping] = None,
                   upstream: bool = False,
                   optimizer: Union[str, Callable, object] = "adam",
                   learning_rate: float = 1e-3,
                   save_checkpoints_steps: int = 1000,
                   keep_checkpoint_max: int = 5,
                   params: Optional[Mapping] = None,
                   stage_input: bool = False) -> Callable:
    """A ``model_fn`` for ``tf.estimator.Estimator`` running ``model`` on a mesh.

    Parameters
    ----------
    model : str, ModelSpec or model config
        A registered name (e.g. ``"resattnet3d-small"``), a ``ModelSpec`` (a network
        of one's own: ``meshpar.models.from_module``; docs/training.md, "Your own
        network") or a registered network's config.
    plan : Plan or path, optional
        Mesh shape, layout, devices and weights from a planner.
    mesh : MeshSpec, optional
        Alternatively, a ready mesh description.
    mesh_shape, layout, devices, split_weights, dim_split_weights
        Alternatively, explicit mesh arguments (default: one local device).
    upstream : bool
        Lower with Mesh-TensorFlow's ``PlacementMeshImpl`` (even splits only).
    optimizer : ``"adam"``, ``"momentum"``, ``"sgd"``, an optimizer or a factory
        The per-variable rule; the step is always race-free.
    learning_rate : float
        The rate, or the peak of a schedule: finite and > 0.
    save_checkpoints_steps, keep_checkpoint_max : int
        Checkpointing of the master variables during training (and at the end);
        both >= 1 (``keep_checkpoint_max=None``: keep every checkpoint).
    params : dict, optional
        Default recipe (:class:`~meshpar.training.recipe.Recipe` keys: loss,
        metrics, schedule, weight decay, clipping); the estimator's own
        ``params`` override it key by key.
    stage_input : bool
        Train each step on the batch fetched during the step before
        (:mod:`meshpar.training.staging`), so the workers do not wait for the
        input pipeline at the start of a step. Same batches in the same order;
        for a training stream that repeats forever (``meshpar train``'s): with a
        finite one, its last batch is fetched but not trained on.

    The input ``features`` are a static-shape batch (``drop_remainder=True``)
    ``[B, *input_shape]`` or a dict with key ``"volume"`` or ``"image"``;
    ``labels`` are ``[B]`` integers.
    """
    spec = as_spec(model)
    upstream = true_or_false(upstream, "upstream")
    stage_input = true_or_false(stage_input, "stage_input")
    mesh = chosen_mesh(spec, plan, mesh, upstream, dict(
        mesh_shape=mesh_shape, layout=layout, devices=devices, split_weights=split_weights,
        dim_split_weights=dim_split_weights))
    learning_rate = number_above(learning_rate, "learning_rate")  # -1 would ascend the loss
    if isinstance(optimizer, str):  # an unknown name was refused at the first step
        optim.make_optimizer(optimizer, learning_rate)
    elif not (callable(optimizer) or isinstance(optimizer, mtf.optimize.Optimizer)):
        raise TypeError(f"optimizer must be 'adam', 'momentum', 'sgd', an optimizer or a "
                        f"factory of one, got {optimizer!r}")
    save_checkpoints_steps = integer_at_least(save_checkpoints_steps, "save_checkpoints_steps")
    keep_checkpoint_max = integer_at_least(keep_checkpoint_max, "keep_checkpoint_max",
                                           none_ok=True)
    defaults = dict(params or {})
    Recipe.from_params(defaults)  # bad defaults fail here, not at the first step

    def model_fn(features, labels, mode, params=None, config=None):
        recipe = Recipe.from_params({**defaults, **(params or {})})
        features = _features_tensor(features)
        batch = features.shape.as_list()[0]
        if batch is None:
            raise ValueError("meshpar needs a static batch size: batch the dataset with "
                             "drop_remainder=True")
        expected = models.known_input_shape(spec)  # None: a module that does not say
        if expected is not None and tuple(features.shape.as_list()[1:]) != expected:
            raise ValueError(f"{spec.name}: features have shape {features.shape.as_list()[1:]}"
                             f", expected {list(expected)}")
        is_training = mode == tf_estimator.ModeKeys.TRAIN
        if labels is None and mode != tf_estimator.ModeKeys.PREDICT:
            raise ValueError(f"{mode} needs labels")
        if labels is not None:
            labels = tf.cast(tf.reshape(labels, [batch]), tf.int32)
        real = None
        if mode == tf_estimator.ModeKeys.EVAL:  # padding (inputs.PAD_LABEL) is scored by nobody
            real = tf.greater_equal(labels, 0)
            labels = tf.maximum(labels, 0)
        puts, on_devices = [], []  # staging: put ops of every step; volumes staged per device
        if is_training and stage_input:
            if mesh.upstream:  # Mesh-TF's own impl imports from the client: stage there
                (features, labels), put, _ = staging.stage(features, labels)
            else:
                (labels,), put, _ = staging.stage(labels)
                on_devices = [features]
            puts.append(put)
        global_step = tf.train.get_or_create_global_step()
        rate = recipe.learning_rate(learning_rate, global_step) if is_training else learning_rate
        lowering, logits, loss, update_ops = lower_model(
            spec, features, labels, mesh, is_training, optimizer, rate, recipe,
            stage_on_devices=on_devices)
        if on_devices:
            puts += _device_puts(lowering, logits, features)
        class_dim = logits.shape.dims[-1]
        tf_logits = tf.identity(lowering.export_to_tf_tensor(logits), name="meshpar_logits")
        probabilities = tf.nn.softmax(tf_logits)
        classes = tf.argmax(tf_logits, axis=-1, output_type=tf.int32)
        restore_hook = mtf.MtfRestoreHook(lowering)

        if mode == tf_estimator.ModeKeys.PREDICT:
            return tf_estimator.EstimatorSpec(
                mode, predictions={"logits": tf_logits, "probabilities": probabilities,
                                   "classes": classes},
                prediction_hooks=[restore_hook])

        tf_loss = tf.identity(tf.cast(lowering.export_to_tf_tensor(loss), tf.float32),
                              name=LOSS_TENSOR_NAME)
        if mode == tf_estimator.ModeKeys.EVAL:
            loss, metric_ops = _evaluation(recipe, real, labels, {
                "classes": classes, "logits": tf_logits, "probabilities": probabilities},
                tf_loss, class_dim.size)
            return tf_estimator.EstimatorSpec(mode, loss=loss, evaluation_hooks=[restore_hook],
                                              eval_metric_ops=metric_ops)

        with tf.control_dependencies(update_ops + puts):
            train_op = tf.assign_add(global_step, 1).op
        tf.summary.scalar("loss", tf_loss)
        tf.summary.scalar("accuracy", tf.reduce_mean(tf.cast(tf.equal(classes, labels),
                                                             tf.float32)))
        tf.summary.scalar("learning_rate", tf.convert_to_tensor(rate, tf.float32))
        saver = tf.train.Saver(tf.global_variables(), sharded=True,
                               max_to_keep=keep_checkpoint_max, defer_build=False,
                               save_relative_paths=True)
        tf.add_to_collection(tf.GraphKeys.SAVERS, saver)
        model_dir = config.model_dir if config is not None else None
        chief_hooks = [restore_hook]
        if model_dir:
            chief_hooks.append(tf.train.CheckpointSaverHook(
                model_dir, save_steps=save_checkpoints_steps, saver=saver,
                listeners=[mtf.MtfCheckpointSaverListener(lowering)]))
        return tf_estimator.EstimatorSpec(mode, loss=tf_loss, train_op=train_op,
                                          training_chief_hooks=chief_hooks,
                                          training_hooks=[staging.StageFirstBatchHook(puts)]
                                          if puts else [])

    model_fn.mesh = mesh
    model_fn.spec = spec
    return model_fn


def lower_model(spec: models.ModelSpec, features, labels, mesh: MeshSpec, is_training: bool,
                optimizer="adam", learning_rate=1e-3, recipe: Optional[Recipe] = None,
                stage_on_devices: Sequence = ()):
    """Build ``spec`` on ``mesh`` and lower it: ``(lowering, mtf logits, mtf loss or None,
    lowered update ops)``; the updates (race-free optimizer step and batch-norm
    averages) only when ``is_training``. ``labels`` is an int32 ``[B]`` tensor or None.
    ``learning_rate``: a float or a float32 TF scalar (a schedule's value);
    ``recipe``: loss, weight decay, clipping (default: cross-entropy, neither).
    ``stage_on_devices``: TF tensors (e.g. ``features``) the mesh imports a step
    ahead through staging areas on its devices
    (:meth:`~meshpar.core.mesh_impl.HeterogeneousMeshImpl.stage_imports`; not
    with ``mesh.upstream``); their put ops are the mesh's ``staging_puts``.
    """
    recipe = recipe or Recipe()
    graph = mtf.Graph()
    mtf_mesh = mtf.Mesh(graph, "mesh")
    logits, bn_updates = spec.build(features, mesh=mtf_mesh, is_training=is_training)
    batch_dim, class_dim = logits.shape.dims[0], logits.shape.dims[-1]
    loss = None
    if labels is not None:
        mtf_labels = mtf.import_tf_tensor(mtf_mesh, labels, mtf.Shape([batch_dim]))
        loss = recipe.loss_fn()(logits, mtf_labels, class_dim)
    update_ops = []
    if is_training:
        if isinstance(learning_rate, tf.Tensor):  # one scalar, on every processor
            learning_rate = mtf.import_tf_tensor(mtf_mesh, learning_rate, mtf.Shape([]))
        rule = recipe.optimizer(optimizer, learning_rate)
        update_ops = optim.race_free_update_ops(graph, loss, rule, extra_dependencies=[logits],
                                                model_updates=bn_updates)
    impl = mesh.make_impl(spec)
    if mesh.upstream:
        _check_even_divisible(graph, impl)
    else:  # random ops (dropout) key each step's draws by the step: resumed runs agree
        impl.random_step = tf.train.get_global_step()
    if stage_on_devices:
        if mesh.upstream:
            raise ValueError("staging on the devices needs meshpar's mesh, not upstream=True")
        impl.stage_imports(stage_on_devices)
    lowering = mtf.Lowering(graph, {mtf_mesh: impl})
    return lowering, logits, loss, [lowering.lowered_operation(op) for op in update_ops]


def check_even_splits(model, batch: int, **mesh_kwargs) -> None:
    """ValueError, before any training, when the mesh of ``mesh_kwargs`` (those of
    :func:`build_model_fn`) is Mesh-TF's own (``upstream=True``) and one of ``model``'s
    laid-out dimensions at batch ``batch`` (the batch itself, channels, space) does
    not divide by its mesh axis: that was said only once the estimator had built
    its first step (``meshpar train`` had printed its header by then). The model's
    Mesh-TF graph is built in a graph of its own and not lowered; a meshpar mesh
    (uneven splits) is not checked."""
    spec = as_spec(model)
    explicit = {key: mesh_kwargs.get(key) for key in
                ("mesh_shape", "layout", "devices", "split_weights", "dim_split_weights")}
    mesh = chosen_mesh(spec, mesh_kwargs.get("plan"), mesh_kwargs.get("mesh"),
                       bool(mesh_kwargs.get("upstream", False)), explicit)
    if not mesh.upstream:
        return
    batch = integer_at_least(batch, "batch")
    with tf.Graph().as_default():
        tf.set_random_seed(0)  # the initializers are built, never run (determinism needs one)
        features = tf.placeholder(tf.float32, [batch, *spec.input_shape])
        graph = mtf.Graph()
        spec.build(features, mesh=mtf.Mesh(graph, "mesh"), is_training=True)
        _check_even_divisible(graph, mesh.make_impl(spec))


def _check_even_divisible(graph, impl) -> None:
    """ValueError naming the first dimension Mesh-TF's even split cannot cut: its
    ``PlacementMeshImpl`` needs every laid-out dimension divisible by its axis
    (its own error names neither the flag nor the way out)."""
    for op in graph.operations:
        for tensor in op.outputs:
            for dim in tensor.shape.dims:
                axis = impl.tensor_dimension_to_mesh_axis(dim)
                if axis is None:
                    continue
                parts = impl.shape.dims[axis]
                if dim.size % parts.size:
                    raise ValueError(
                        f"Mesh-TensorFlow's even split (upstream / --mesh-impl mtf) cannot cut "
                        f"dimension {dim.name} of size {dim.size} into {parts.size} equal parts "
                        f"on mesh axis {parts.name}: choose a size divisible by {parts.size} "
                        "or use meshpar's mesh, which splits unevenly")


def _device_puts(lowering, logits, features) -> list:
    """The put ops of ``features`` staged on the mesh's devices; an error if the model
    did not import ``features`` itself (it would train on the next batch)."""
    puts = list(lowering.mesh_impl(logits).staging_puts)
    if not puts:
        raise RuntimeError(f"the model did not import its input {features.name} as given, "
                           "so it cannot be staged on the devices; build with stage_input=False")
    return puts


def _features_tensor(features):
    if isinstance(features, Mapping):
        for key in ("volume", "image", "x"):
            if key in features:
                return tf.convert_to_tensor(features[key])
        raise ValueError(f"features dict needs a 'volume' or 'image' key, got {list(features)}")
    return tf.convert_to_tensor(features)


def _evaluation(recipe: Recipe, real, labels, predictions: dict, batch_loss, num_classes: int):
    """``(loss, eval_metric_ops)`` of an evaluation batch over its ``real`` examples
    only (the padding of a last batch is left out).

    The loss is the vector of the real examples' losses
    (:func:`~meshpar.training.losses.example_losses`) with its shape hidden: the
    estimator's ``loss`` metric is ``tf.metrics.mean`` of the tensor it is
    given (it reshapes one of known shape to a scalar; one of unknown rank it
    keeps), so the mean runs over every example of the set, not over batches
    of unequal real sizes. A callable loss is a batch mean on the mesh that
    cannot leave padding out: it is the batch's value, and a padded batch is
    refused when it runs.
    """
    from meshpar.training.losses import example_losses

    labels = tf.boolean_mask(labels, real)
    kept = {name: tf.boolean_mask(t, real) for name, t in predictions.items()}
    metrics = _metrics(labels, kept["classes"], kept["probabilities"], num_classes)
    extra = recipe.eval_metrics(labels, kept)
    clash = sorted(set(extra) & set(metrics))
    if clash:
        raise ValueError(f"params['metrics'] redefines {', '.join(clash)}")
    loss = example_losses(recipe.loss, kept["logits"], labels,
                          {"class_weights": recipe.class_weights,
                           "focal_gamma": recipe.focal_gamma})
    if loss is not None:
        return tf.placeholder_with_default(loss, shape=None), {**metrics, **extra}
    check = tf.debugging.assert_equal(
        tf.reduce_all(real), True, message="a callable loss cannot leave out the padding "
        "of a short last batch: evaluate on whole batches (drop_remainder=True)")
    with tf.control_dependencies([check]):
        return tf.identity(batch_loss), {**metrics, **extra}


def _metrics(labels, classes, probabilities, num_classes: int) -> dict:
    """Accuracy; for two classes also AUC, sensitivity and specificity, each NaN
    when the examples scored so far lack the class it needs (an AUC of one class,
    the recall of a class that is absent, are undefined, not 1 or 0)."""
    metrics = {"accuracy": tf.metrics.accuracy(labels, classes)}
    if num_classes == 2:
        positive = tf.equal(labels, 1)
        predicted = tf.equal(classes, 1)
        tp, tp_update = tf.metrics.true_positives(positive, predicted)
        fn, fn_update = tf.metrics.false_negatives(positive, predicted)
        tn, tn_update = tf.metrics.true_negatives(positive, predicted)
        fp, fp_update = tf.metrics.false_positives(positive, predicted)
        auc, auc_update = tf.metrics.auc(labels, probabilities[:, 1],
                                         summation_method="careful_interpolation")
        nan = tf.constant(float("nan"))

        def defined(value, *counts):
            return tf.where(tf.reduce_all([c > 0 for c in counts]), value, nan)

        metrics.update({
            "auc": (defined(auc, tp + fn, tn + fp),
                    tf.group(auc_update, tp_update, fn_update, tn_update, fp_update)),
            "sensitivity": (defined(tf.math.divide_no_nan(tp, tp + fn), tp + fn),
                            tf.group(tp_update, fn_update)),
            "specificity": (defined(tf.math.divide_no_nan(tn, tn + fp), tn + fp),
                            tf.group(tn_update, fp_update)),
        })
    return metrics


def diverged_in(error: BaseException) -> Optional[ValueError]:
    """A ValueError saying that training diverged when ``error`` is TensorFlow's
    report of a NaN loss (training) or of NaN probabilities (the AUC's range check in
    evaluation, after the step that made the weights NaN); None for any other error."""
    import tensorflow.compat.v1 as tf

    text = str(getattr(error, "message", None) or error)
    nan_loss = isinstance(error, tf.train.NanLossDuringTrainingError)
    nan_scores = (isinstance(error, tf.errors.InvalidArgumentError)
                  and "predictions must be in [0, 1]" in text and "nan" in text.lower())
    if not (nan_loss or nan_scores):
        return None
    return ValueError("training diverged: the loss became NaN (the weights of the last "
                      "checkpoint may be NaN too); lower --lr or set --clip-norm, and use a "
                      "new --model-dir")


def run_config(model_dir: str, seed: int = 1, save_summary_steps: int = 100,
               log_step_count_steps: int = 100, threads: int = 1,
               cluster_client=None) -> "tf_estimator.RunConfig":
    """A deterministic ``RunConfig``: graph seed, ``threads`` intra/inter-op threads.

    ``seed``: an integer >= 0 (None: none); ``threads``: an integer >= 0 (0: TF's
    choice); the step counts: integers >= 1 (None: never). Set
    ``TF_DETERMINISTIC_OPS=1`` in the environment too for bit-reproducible runs.
    With ``cluster_client`` (a :class:`meshpar.runtime.client.ClusterClient`)
    training and evaluation sessions run on that TF cluster, mastered by this
    process.
    """
    if isinstance(model_dir, str):  # TF names its files in UTF-8: failed at train()
        try:
            model_dir.encode("utf-8")
        except UnicodeEncodeError:
            raise ValueError(f"model_dir {model_dir!r} is not UTF-8 text (bytes of another "
                             "encoding); TensorFlow keeps its checkpoints under UTF-8 "
                             "names") from None
    seed = integer_at_least(seed, "seed", 0, none_ok=True)
    if seed is not None and seed > 2**31 - 2:  # TF keeps seeds modulo 2**31 - 1
        raise ValueError(f"seed must be at most {2**31 - 2}, got {seed}: TensorFlow takes "
                         f"seeds modulo 2**31 - 1, so it would be seed {seed % (2**31 - 1)}")
    threads = integer_at_least(threads, "threads", 0)  # TF: < 0 runs all ops in one thread
    if threads > 2**31 - 1:  # was the protobuf's 'Value out of range: ...', naming nothing
        raise ValueError(f"threads must be at most 2**31 - 1 (a TF session's int32), got "
                         f"{threads}")
    save_summary_steps = integer_at_least(save_summary_steps, "save_summary_steps", none_ok=True)
    log_step_count_steps = integer_at_least(log_step_count_steps, "log_step_count_steps",
                                            none_ok=True)
    session_config = tf.ConfigProto(intra_op_parallelism_threads=threads,
                                    inter_op_parallelism_threads=threads,
                                    allow_soft_placement=True)
    if cluster_client is not None:
        session_config = cluster_client.session_config(session_config)
    # With a client, this process masters the whole mesh: a TF_CONFIG in the environment
    # (`--cluster TF_CONFIG`: the workers' own, no chief) describes the workers, not a
    # between-graph job of this process, and RunConfig refused it ('must have one
    # "chief" node') or took its model_dir and device filters from it.
    hidden = os.environ.pop("TF_CONFIG", None) if cluster_client is not None else None
    try:
        config = tf_estimator.RunConfig(model_dir=model_dir, tf_random_seed=seed,
                                        session_config=session_config,
                                        save_summary_steps=save_summary_steps,
                                        log_step_count_steps=log_step_count_steps)
    finally:
        if hidden is not None:
            os.environ["TF_CONFIG"] = hidden
    if cluster_client is not None:
        # RunConfig takes its masters only from TF_CONFIG, which describes a
        # between-graph job; here one process drives the whole mesh.
        config._master = cluster_client.target  # pylint: disable=protected-access
        config._evaluation_master = cluster_client.target  # pylint: disable=protected-access
    return config


def make_estimator(model, model_dir: str, plan=None, *, seed: int = 1, threads: int = 1,
                   save_summary_steps: int = 100, log_step_count_steps: int = 100,
                   params: Optional[Mapping] = None, cluster_client=None,
                   **model_fn_kwargs) -> "tf_estimator.Estimator":
    """``tf.estimator.Estimator`` for ``model`` on a mesh (see :func:`build_model_fn`);
    ``params``: the recipe (:class:`~meshpar.training.recipe.Recipe` keys).
    ValueError for a plan, ``mesh=`` or ``devices=`` of worker tasks in a process
    that is not one of that cluster's (no ``TF_CONFIG``): no device here has their
    names. Bad ``params`` are refused here, not at the first step.

    ``cluster_client`` (a :class:`~meshpar.runtime.client.ClusterClient`): this
    process masters the mesh on that cluster's workers (:func:`run_config`), as
    ``meshpar train --cluster`` does. Without one, a ``TF_CONFIG`` that lists
    workers and no chief or master (the layout ``meshpar worker`` reads) is
    mastered the same way, through a client of its workers; a ``TF_CONFIG``
    with a chief is tf.estimator's own between-graph job."""
    Recipe.from_params(params)
    _refuse_file_as_model_dir(model_dir)
    refuse_pattern_path(model_dir, "model_dir")
    if model_dir is not None and os.path.isdir(model_dir):  # a lost 'checkpoint' file
        unfound = unfound_checkpoints(os.fspath(model_dir), "the estimator would start again "
                                      "at step 0 and write over them", "give another model_dir")
        if unfound:
            raise ValueError(unfound)
    if cluster_client is None:
        cluster_client = _workers_only_tf_config_client()
    if "TF_CONFIG" not in os.environ and cluster_client is None:
        _refuse_worker_devices(plan, model_fn_kwargs.get("devices"), model_fn_kwargs.get("mesh"))
    model_fn = build_model_fn(model, plan, **model_fn_kwargs)
    return tf_estimator.Estimator(
        model_fn, model_dir=model_dir, params=dict(params or {}),
        config=run_config(model_dir, seed, save_summary_steps, log_step_count_steps, threads,
                          cluster_client=cluster_client))


def _workers_only_tf_config_client():
    """A :class:`~meshpar.runtime.client.ClusterClient` of ``TF_CONFIG``'s workers when
    it lists a ``worker`` job and no ``chief`` or ``master`` (RunConfig refused that
    layout: 'If "cluster" is set in TF_CONFIG, it must have one "chief" node'), else
    None; ValueError for another job beside the workers (a ``ps``), which would sit
    idle (:func:`~meshpar.runtime.cluster_files.worker_addresses`). Not probed here:
    the session says which worker it cannot reach."""
    if not os.environ.get("TF_CONFIG"):
        return None
    from meshpar.runtime.client import ClusterClient
    from meshpar.runtime.cluster_files import load_cluster, worker_addresses

    jobs, _ = load_cluster(None)
    if "worker" not in jobs or {"chief", "master"} & set(jobs):
        return None
    return ClusterClient(worker_addresses(None), check=False)


def _refuse_file_as_model_dir(model_dir) -> None:
    """ValueError if ``model_dir`` is a file or lies under one: the estimator took it,
    and TensorFlow failed at the first checkpoint with a traceback. TypeError for a
    ``model_dir`` that is no path (os.fspath's own error named no argument)."""
    if model_dir is not None and not isinstance(model_dir, (str, bytes, os.PathLike)):
        raise TypeError(f"model_dir must be a path (str or os.PathLike), got {model_dir!r}")
    if model_dir is None or not os.fspath(model_dir):
        return  # None: a temporary directory; "": the estimator's own error
    path = os.path.abspath(os.fspath(model_dir))
    while not os.path.exists(path) and os.path.dirname(path) != path:
        path = os.path.dirname(path)
    if not os.path.isdir(path):
        raise ValueError(f"model_dir {model_dir}: {path} is a file, not a directory")


def _refuse_worker_devices(plan, devices, mesh) -> None:
    """ValueError if the mesh make_estimator would build sits on ``/job:worker`` tasks,
    which a process outside that cluster does not have (TF would fail at the first
    step with a graph-execution traceback)."""
    if devices is not None and not isinstance(devices, (str, bytes)):
        names, what = [str(d) for d in devices], "devices="
    elif plan is not None and devices is None:
        names, what = [str(d) for d in MeshSpec.from_plan(plan).devices], "plan="
    elif isinstance(mesh, MeshSpec):
        names, what = [str(d) for d in mesh.devices], "mesh="
    else:
        return
    workers = [d for d in names if d.startswith("/job:worker")]
    if workers:
        instead = "local devices" if what == "devices=" else "devices="
        raise ValueError(f"{what} places the mesh on worker tasks ({workers[0]}, ...), which "
                         f"this process does not have: pass {instead} ([''] * {len(names)} "
                         "emulates them here), or train on the cluster with TF_CONFIG set or "
                         "`meshpar train --cluster`")


class LossHistoryHook(tf_estimator.SessionRunHook):
    """Records the training loss of every step (``hook.losses``) and when each
    step ended (``hook.step_ends``, ``time.perf_counter`` seconds; see
    :func:`meshpar.training.throughput.steady_state`).

    Optionally calls ``callback(step_index, loss)`` after each step (a
    progress bar, for instance).
    """

    def __init__(self, callback: Optional[Callable[[int, float], None]] = None):
        self.losses = []
        self.step_ends = []
        self._callback = callback
        self._loss = None

    def begin(self):
        """Find the loss tensor in the graph being run."""
        self._loss = tf.get_default_graph().get_tensor_by_name(LOSS_TENSOR_NAME + ":0")

    def before_run(self, run_context):
        """Ask the session to fetch the loss with every training step."""
        return tf.train.SessionRunArgs(self._loss)

    def after_run(self, run_context, run_values):
        """Record the step's loss and call ``callback`` with it."""
        self.step_ends.append(time.perf_counter())
        value = float(run_values.results)
        self.losses.append(value)
        if self._callback is not None:
            self._callback(len(self.losses), value)


class StepTraceHook(tf_estimator.SessionRunHook):
    """Traces one training step (``FULL_TRACE``) and keeps, per task, where its time
    went (``hook.breakdown``; see :func:`meshpar.runtime.step_trace.step_breakdown`).

    ``step`` counts the steps this hook has seen, from 1; a step well after
    warm-up shows the steady state. ``chrome_trace``: also write the step's
    timeline there (Chrome trace JSON).
    """

    def __init__(self, step: int, chrome_trace: Optional[str] = None):
        if step < 1:
            raise ValueError(f"trace step must be >= 1, got {step}")
        self.step = int(step)
        self.chrome_trace = chrome_trace
        self.breakdown = None
        self.wall_seconds = None
        self._seen = 0
        self._started = None

    def before_run(self, run_context):
        """Ask for a full trace on the chosen step."""
        self._seen += 1
        if self._seen != self.step:
            return None
        self._started = time.perf_counter()
        return tf.train.SessionRunArgs(
            fetches=None, options=tf.RunOptions(trace_level=tf.RunOptions.FULL_TRACE))

    def after_run(self, run_context, run_values):
        """Turn the traced step's ``step_stats`` into the per-task breakdown."""
        if self._seen != self.step or run_values.run_metadata is None:
            return
        from meshpar.runtime.step_trace import step_breakdown

        self.wall_seconds = time.perf_counter() - self._started
        stats = run_values.run_metadata.step_stats
        self.breakdown = step_breakdown(stats, self.wall_seconds)
        if self.chrome_trace:  # for chrome://tracing or Perfetto
            from tensorflow.python.client import timeline

            from meshpar.planning.jsonio import write_text_atomic

            # through a temporary file: an earlier trace is kept until this one is whole
            write_text_atomic(self.chrome_trace,
                              timeline.Timeline(stats).generate_chrome_trace_format())
