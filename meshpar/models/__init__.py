"""Networks written for Mesh-TensorFlow with one named, splittable dimension per layer.

One network per file (:mod:`~meshpar.models.resattnet3d`,
:mod:`~meshpar.models.vgg_cifar`), each with the same four entry points:

=====================  =====================================================================  ==========
name                   what                                                                   TensorFlow
=====================  =====================================================================  ==========
``<Net>Config``        frozen dataclass of hyper-parameters                                   no
``describe(config)``   layer table (:class:`~meshpar.planning.description.ModelDescription`)  no
``layout_rules(...)``  layout string: filters -> model, batch -> batch                        no
``build(x, config)``   the mtf graph: ``(logits, update_ops)``                                yes (lazy)
=====================  =====================================================================  ==========

:func:`get` maps the model names used on the command line and in plans
(``resattnet3d-small``, ``resattnet3d-full`` alias ``resattnet3d``,
``resattnet3d-tiny``, ``resattnet3d-small-local-bn`` (batch norm over each
device's share of the batch), ``resattnet3d-small-48`` and
``resattnet3d-wide-48`` (on a 48^3 grid; the latter 1.5x as wide, ``meshpar
evaluate``'s default), ``vgg-cifar``, ``vgg-cifar-small``, and the split-pair
variants ``vgg-cifar-pairs``, ``vgg-cifar-small-pairs``) to a module and a
configuration; it is the one registry the planner, the trainer and the
benchmarks share. :func:`from_module` makes the :class:`ModelSpec` of a
network of one's own (a module with the same entry points); :func:`resolve`
reads a ``--model`` value: a registered name or a reference to a module of
one's own (``mynet.py[:ATTR]``, ``pkg.mynet[:ATTR]``; :mod:`.reference`).
Nothing here imports TensorFlow.
"""
from __future__ import annotations

import dataclasses
from typing import NamedTuple, Optional

from meshpar.models import resattnet3d, vgg_cifar
from meshpar.models.resattnet3d import ResAttNet3DConfig
from meshpar.models.vgg_cifar import VggCifarConfig

__all__ = ["resattnet3d", "vgg_cifar", "ResAttNet3DConfig", "VggCifarConfig", "ModelSpec",
           "get", "from_module", "MODULE_FUNCTIONS", "names", "names_for_help", "input_shape",
           "known_input_shape", "describe_model", "resolve", "num_classes", "reference"]


class ModelSpec(NamedTuple):
    """A named model: its module (``describe``/``build``/``layout_rules``) and config;
    ``reference``: for a network of one's own named on the command line, the
    reference that finds it again (:func:`resolve`; None otherwise)."""

    name: str
    module: object
    config: object
    reference: Optional[str] = None

    def describe(self):
        """The model's layer table for the planner (a ``ModelDescription``): its module's
        ``describe(config)``; for a module of one's own without one but with
        ``input_shape(config)``, read from the graph its ``build`` makes
        (:func:`~meshpar.core.graph_description.describe_built`). A table a module
        names otherwise than the spec or its config is named as the spec (the
        planner's rule), so that a profile and a plan of it name the same model."""
        if callable(getattr(self.module, "describe", None)) or not callable(
                getattr(self.module, "input_shape", None)):
            table = self.module.describe(self.config)
        else:
            from meshpar.core.graph_description import describe_built  # imports TensorFlow

            table = describe_built(self.build, self.input_shape, self.name)
        known = (self.name, getattr(self.config, "name", None))
        if dataclasses.is_dataclass(table) and not isinstance(table, type) and isinstance(
                getattr(table, "name", None), str) and table.name not in known:
            table = dataclasses.replace(table, name=self.name)
        return table

    def layout_rules(self, model_axis: str = "model", batch_axis: str = "batch") -> str:
        """Layout string: batch on ``batch_axis``, the model's splittable dims on ``model_axis``."""
        return self.module.layout_rules(self.config, model_axis=model_axis,
                                        batch_axis=batch_axis)

    def build(self, inputs, **kwargs):
        """Build the network on ``inputs``: ``(logits, update_ops)``; keyword arguments
        (``mesh``, ``is_training``) go to the model's ``build`` (see its module).
        TypeError where that returns anything but such a pair.
        """
        result = self.module.build(inputs, self.config, **kwargs)
        if not (isinstance(result, (tuple, list)) and len(result) == 2):
            raise TypeError(f"model {self.name}: build(inputs, config, mesh=, is_training=) "
                            "must return (logits, update_ops): logits [batch, ..., classes], "
                            f"update_ops a list (empty without batch norm), got {result!r}")
        return result

    @property
    def input_shape(self) -> tuple:
        """Per-sample input shape, channels last (``(D, H, W, C)`` or ``(H, W, C)``): a
        network of one's own gives it by an ``input_shape(config)`` function in its module.
        """
        return input_shape(self.config, self.module)


#: what a network's module gives: the functions :class:`ModelSpec` calls
MODULE_FUNCTIONS = {
    "describe": "describe(config) -> ModelDescription, the layer table for the planner "
                "(or input_shape(config) -> per-sample shape, channels last, to read the "
                "table from the built graph)",
    "build": "build(inputs, config, mesh=None, is_training=True) -> (logits, update_ops)",
    "layout_rules": "layout_rules(config, model_axis='model', batch_axis='batch') -> str",
}


def from_module(module, config=None, name: Optional[str] = None) -> ModelSpec:
    """The :class:`ModelSpec` of a network of one's own, for the planner and the
    estimator as a registered name is (docs/training.md, "Your own network").

    ``module`` (a module, or any object with these attributes) gives
    ``describe``, ``build`` and ``layout_rules`` (:data:`MODULE_FUNCTIONS`) and
    optionally ``input_shape(config)``; with ``input_shape``, ``describe`` may be
    left out (the layer table is then read from the graph ``build`` makes);
    ``config`` is handed to each of them;
    ``name`` (default: the config's ``name`` field, else the module's
    ``__name__``) is the name plans are made for. TypeError naming what the
    module lacks.
    """
    missing = [f for f in MODULE_FUNCTIONS if not callable(getattr(module, f, None))
               and not (f == "describe" and callable(getattr(module, "input_shape", None)))]
    if missing:
        raise TypeError(f"model module {getattr(module, '__name__', module)!r} lacks "
                        f"{', '.join(missing)}: a network's module gives "
                        + "; ".join(MODULE_FUNCTIONS[f] for f in missing))
    name = name if name is not None else getattr(config, "name", None) or getattr(
        module, "__name__", None)
    if not isinstance(name, str) or not name:
        raise ValueError(f"from_module: give name= (a non-empty string), got {name!r}")
    return ModelSpec(name, module, config)


# name -> (module, config factory, the factory's keyword arguments)
_REGISTRY = {
    "resattnet3d-small": (resattnet3d, ResAttNet3DConfig.small, {}),
    "resattnet3d-full": (resattnet3d, ResAttNet3DConfig.full, {}),
    "resattnet3d": (resattnet3d, ResAttNet3DConfig.full, {}),  # ALIASES
    # resattnet3d-small's layers on a 48^3 grid (4.2 mm voxels over the phantoms' 200 mm
    # field of view instead of 6.25 mm): the accuracy protocol's default, since sMCI vs
    # pMCI differ in hippocampi a few voxels wide at 32^3 (docs/accuracy.md)
    "resattnet3d-small-48": (resattnet3d, ResAttNet3DConfig.small, dict(
        input_shape=(48, 48, 48), name="resattnet3d-small-48")),
    # resattnet3d-small-48 with 1.5x the channels (stem 12, stages 12/24/48; 2.2x the
    # parameters): the accuracy protocol's default since sMCI vs pMCI pilots gained
    # with width and not with a finer grid or more subjects (docs/accuracy.md)
    "resattnet3d-wide-48": (resattnet3d, ResAttNet3DConfig.small, dict(
        input_shape=(48, 48, 48), stem_filters=12, stage_filters=(12, 24, 48),
        name="resattnet3d-wide-48")),
    # resattnet3d-small with batch norm over each device's share of the batch
    # (bn_statistics="local"): no synchronisation per layer on a batch split
    "resattnet3d-small-local-bn": (resattnet3d, ResAttNet3DConfig.small, dict(
        bn_statistics="local", name="resattnet3d-small-local-bn")),
    "resattnet3d-tiny": (resattnet3d, ResAttNet3DConfig.small, dict(
        input_shape=(16, 16, 16), stem_filters=4, stage_filters=(4, 8),
        attention_stages=(1,), name="resattnet3d-tiny")),
    "vgg-cifar": (vgg_cifar, VggCifarConfig.cifar10, {}),
    "vgg-cifar-small": (vgg_cifar, VggCifarConfig.small, {}),
    "vgg-cifar-pairs": (vgg_cifar, VggCifarConfig.cifar10,
                        dict(split_pairs=True, name="vgg-cifar-pairs")),
    "vgg-cifar-small-pairs": (vgg_cifar, VggCifarConfig.small,
                              dict(split_pairs=True, name="vgg-cifar-small-pairs")),
}


#: other names of a registered model: the same model and config, one name in results
ALIASES = {"resattnet3d": "resattnet3d-full"}


def names() -> list:
    """Registered model names (aliases included)."""
    return sorted(_REGISTRY)


def names_for_help() -> str:
    """The names for a ``--model`` help text, each alias next to what it names."""
    return ", ".join(n for n in names() if n not in ALIASES) + "".join(
        f" ({alias} = {name})" for alias, name in ALIASES.items())


def get(name: str, **overrides) -> ModelSpec:
    """The :class:`ModelSpec` registered as ``name``; ``overrides`` change fields of its
    config. ValueError lists the choices."""
    try:
        module, make, defaults = _REGISTRY[name]
    except (KeyError, TypeError):  # TypeError: a list or dict (a profile's "model": [...])
        raise ValueError(f"unknown model {name!r}; choose one of {', '.join(names())}") from None
    return ModelSpec(name, module, make(**{**defaults, **overrides}))


def input_shape(config, module=None) -> tuple:
    """Per-sample input shape of a config, channels last; ``module``'s
    ``input_shape(config)`` where it has one (a network of one's own), else
    ValueError for a config that is not a registered network's."""
    if callable(getattr(module, "input_shape", None)):
        return tuple(int(n) for n in module.input_shape(config))
    if isinstance(config, ResAttNet3DConfig):
        return tuple(config.input_shape) + (config.in_channels,)
    if isinstance(config, VggCifarConfig):
        return tuple(config.image_shape) + (config.in_channels,)
    raise ValueError(f"unknown model config {config!r}: a network of one's own gives its "
                     "per-sample input shape (channels last) by an input_shape(config) "
                     "function in its module")


def known_input_shape(spec: ModelSpec):
    """``spec``'s per-sample input shape, or None where its module does not say (a
    network of one's own without ``input_shape(config)``)."""
    if callable(getattr(spec.module, "input_shape", None)) or isinstance(
            spec.config, (ResAttNet3DConfig, VggCifarConfig)):
        return spec.input_shape
    return None


def describe_model(name: str, **overrides):
    """The layer table (:class:`~meshpar.planning.description.ModelDescription`) of a named
    model (or a network of one's own, :func:`resolve`); ``overrides`` change fields of
    its config.

    >>> describe_model("vgg-cifar").split_dims["conv1_filters"]
    60
    """
    return resolve(name, **overrides).describe()


from meshpar.models import reference  # noqa: E402  (after ModelSpec, which it makes)
from meshpar.models.reference import num_classes, resolve  # noqa: E402
