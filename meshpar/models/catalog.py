"""Built-in model descriptions by name (pure Python, no TensorFlow).

=====================  =====================================================
name                   model
=====================  =====================================================
``vgg-cifar``          the CIFAR-10 VGG-like net of Moreno-Alvarez et al.
``vgg-cifar-small``    a tiny variant of it (8x8 images) for tests
``resattnet3d-small``  3D-ResAttNet, 32^3 input, stages 8/16/32
``resattnet3d``        3D-ResAttNet at MRI size (alias ``resattnet3d-full``)
=====================  =====================================================

The tables come from each model module's ``describe(config)``, which walks the
same architecture as its Mesh-TensorFlow ``build``, so the planner and the
trained graph agree on layer and dimension names.
"""
from __future__ import annotations

from meshpar.description import ModelDescription

_ALIASES = {"resattnet3d": "resattnet3d-full"}
MODEL_NAMES = ("vgg-cifar", "vgg-cifar-small", "resattnet3d-small", "resattnet3d")


def describe_model(name: str, **overrides) -> ModelDescription:
    """The layer table of built-in model ``name``; ``overrides`` go to its config.

    >>> describe_model("vgg-cifar").split_dims["conv1_filters"]
    60
    """
    key = _ALIASES.get(name, name)
    if key in ("vgg-cifar", "vgg-cifar-small"):
        from meshpar.models import vgg_cifar

        config_cls = vgg_cifar.VggCifarConfig
        config = config_cls.cifar10(**overrides) if key == "vgg-cifar" \
            else config_cls.small(**overrides)
        return vgg_cifar.describe(config)
    if key in ("resattnet3d-small", "resattnet3d-full"):
        from meshpar.models import resattnet3d

        config_cls = resattnet3d.ResAttNet3DConfig
        config = config_cls.small(**overrides) if key == "resattnet3d-small" \
            else config_cls.full(**overrides)
        return resattnet3d.describe(config)
    raise ValueError(f"unknown model {name!r}; built-in models: {', '.join(MODEL_NAMES)}")
