"""What a ``--model`` value names: a registered model or a network of one's own.

Every command that takes ``--model`` (``plan``, ``train``, ``predict`` through the
run file, ``evaluate``, ``profile``, ``bench train/memory --models``) reads it
with :func:`resolve`, the one reader of this notion:

=======================  ====================================================
value                    names
=======================  ====================================================
``NAME``                 a registered model (:func:`meshpar.models.names`)
``PATH.py[:ATTR]``       a Python file: relative to the current directory,
                         absolute or under ``~``
``MODULE[:ATTR]``        an importable module, dotted (``pkg.mynet``) or
                         followed by ``:ATTR`` (``mynet:CONFIG``), found in
                         the current directory or on ``sys.path``
=======================  ====================================================

A value holding a ``/`` or whose part before ``:ATTR`` ends in ``.py`` is a
file; else one holding a ``.`` or a ``:`` is a module; else a registered name
(registered names hold none of ``/ . :``, so no value is both).
``ATTR`` (dotted, e.g. ``Config.small``) names the config in the module: an
object, or a callable taking no arguments that returns it (a class, a
factory). Without ``ATTR`` the config is the module's ``CONFIG``, else what
its ``config()`` returns; a module with both, or neither, is refused. The
module gives the functions of :data:`~meshpar.models.MODULE_FUNCTIONS`
(:func:`~meshpar.models.from_module` checks them).

The network's name (what plans are made for) is the config's ``name`` field
when it has one, else the module's (the file's stem, or the dotted module
name) followed by ``:ATTR`` when given; a name that is a registered model's is
refused. Its :attr:`~meshpar.models.ModelSpec.reference` (what ``plan.json``
and ``meshpar_run.json`` record, so that the next command finds the network
again) is the file's absolute path, or the module name, with ``:ATTR``.
Two references name one network when they read the same file with the same
``:ATTR`` (:func:`same_reference`: a module and its path, a path through a link).

A file's folder is on ``sys.path`` while it is imported, so its neighbour modules
import; the neighbours of another folder's file read earlier in the process are
taken out of ``sys.modules`` meanwhile, so each network gets its own. A module is
looked for in the current directory at each :func:`resolve`, setting aside one of
that name :func:`resolve` read from another directory; one the caller imported
itself from another directory is refused (name the file instead), as the current
directory's would be shadowed by it. A module found only on ``sys.path`` is the
one already imported, if it is.

Imports no TensorFlow itself; the module it imports may.
"""
from __future__ import annotations

import dataclasses
import hashlib
import importlib
import importlib.util
import os
import re
import sys
from typing import NamedTuple, Optional

__all__ = ["Reference", "is_reference", "parse_reference", "resolve", "same_reference",
           "check_plan_model", "num_classes", "REFERENCE_SYNTAX"]

#: the syntax in a few words, for ``--model`` help texts
REFERENCE_SYNTAX = ("or a network of one's own: PATH.py[:ATTR] or MODULE[:ATTR], ATTR naming "
                    "its config (default: the module's CONFIG or config())")

_ATTR = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*\Z")


class Reference(NamedTuple):
    """A parsed reference: ``kind`` ``"file"`` or ``"module"``, ``target`` (the path as
    given, or the dotted module name) and ``attr`` (None: the default config)."""

    kind: str
    target: str
    attr: Optional[str]


def is_reference(text) -> bool:
    """Whether the ``--model`` value ``text`` refers to a module of one's own (holds a
    ``/``, a ``.`` or a ``:``) rather than naming a registered model."""
    return isinstance(text, str) and any(c in text for c in "/.:")


def parse_reference(text: str) -> Reference:
    """The :class:`Reference` ``text`` spells; ValueError naming it when it is not one
    (an empty or malformed ``ATTR``, a module name that is not dotted identifiers)."""
    if not is_reference(text):
        raise ValueError(f"model {text!r} is a name, not a reference to a module")
    target, attr = text, None
    tail = text.rpartition(":")[2]
    if ":" in text and not ("/" in tail or os.sep in tail or tail.endswith(".py")):
        # (a ':' before the path's last part is a folder's name: dir:1/mynet.py)
        target, _, attr = text.rpartition(":")
        if not _ATTR.match(attr):
            raise ValueError(f"model {text!r}: {attr!r} after ':' is not an attribute name "
                             "(give PATH.py:ATTR or MODULE:ATTR, ATTR naming the config)")
    if not target:
        raise ValueError(f"model {text!r}: no file or module before ':{attr}'")
    if "/" in target or os.sep in target or target.endswith(".py"):
        return Reference("file", target, attr)
    if not all(part.isidentifier() for part in target.split(".")):
        raise ValueError(f"model {text!r}: {target!r} is neither a Python file (PATH.py) nor "
                         "a module name (dotted identifiers, e.g. pkg.mynet)")
    return Reference("module", target, attr)


def resolve(text, **overrides):
    """The :class:`~meshpar.models.ModelSpec` a ``--model`` value names: a registered
    model (:func:`meshpar.models.get`) or a network of one's own (see the module's
    docstring), its config's fields changed by ``overrides`` (a dataclass config of
    one's own: :func:`dataclasses.replace`). ValueError in one line
    for a missing file, a module that does not import (naming it and the exception),
    a missing attribute or config, or a module lacking a function."""
    from meshpar import models

    if not is_reference(text):
        try:
            return models.get(text, **overrides)
        except ValueError as err:
            if isinstance(text, str) and text and text.isidentifier():
                raise ValueError(f"{err}; or a network of one's own: {text}.py, or "
                                 f"{text}:ATTR for a module on sys.path") from None
            raise
    ref = parse_reference(text)
    module, canonical, short = (_load_file if ref.kind == "file" else _load_module)(text, ref)
    _from_module(models, text, module, canonical, None, short)  # what it lacks, said first
    config = _config(text, module, ref.attr)
    if overrides:
        config = _overridden(text, config, overrides)
    name = getattr(config, "name", None)
    if not (isinstance(name, str) and name):
        name = short + (f":{ref.attr}" if ref.attr else "")
    elif name in models.names():
        raise ValueError(f"model {text!r}: its config is named {name!r}, a registered "
                         "model's name; name it otherwise")
    reference = canonical + (f":{ref.attr}" if ref.attr else "")
    return _from_module(models, text, module, canonical, config, name)._replace(
        reference=reference)


def _from_module(models, text, module, canonical, config, name):
    """:func:`~meshpar.models.from_module`, its TypeError (what the module lacks) as a
    ValueError of ``text`` in one line, naming the file or module rather than the
    private module name."""
    try:
        return models.from_module(module, config, name=name)
    except TypeError as err:
        raise ValueError(f"model {text!r}: " + str(err).replace(
            repr(module.__name__), repr(canonical), 1)) from None


def _load_file(text: str, ref: Reference) -> tuple:
    """``(module, absolute path, stem)`` of a file reference, imported once per
    version of the file (a private module name: the file's own may be taken)."""
    path = os.path.abspath(os.path.expanduser(ref.target))
    if os.path.isdir(path):
        raise ValueError(f"model {text!r}: {path} is a directory, not a Python file")
    if not os.path.isfile(path):
        raise ValueError(f"model {text!r}: no such file {path}")
    if not path.endswith(".py"):
        raise ValueError(f"model {text!r}: {path} is not a Python file (.py)")
    stem = os.path.basename(path)[:-3]
    real = os.path.realpath(path)
    stat = os.stat(real)
    digest = hashlib.sha1(f"{real}\0{stat.st_mtime_ns}\0{stat.st_size}".encode()).hexdigest()
    name = "_meshpar_model_" + re.sub(r"\W", "_", stem) + "_" + digest[:12]
    if name in sys.modules:
        return sys.modules[name], path, stem
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while it runs
    folder = os.path.dirname(path)
    hidden = _hide_other_neighbours(folder)
    before = set(sys.modules)
    sys.path.insert(0, folder)  # its neighbours import as they do under `python mynet.py`
    try:
        spec.loader.exec_module(module)
    except BaseException as err:  # noqa: B902  (a SystemExit in the module too)
        del sys.modules[name]
        raise ValueError(f"model {text!r}: importing {path} failed: {_one_line(err)}") from None
    finally:
        if folder in sys.path:
            sys.path.remove(folder)
        _note_neighbours(folder, before | {name})
        for n, other in hidden.items():
            sys.modules.setdefault(n, other)
    return module, path, stem


#: folder of a network's file (_load_file) or of the current directory a module was
#: found in (_load_module) -> the modules read from it (its neighbours, that module)
_NEIGHBOURS: dict = {}


def _note_neighbours(folder: str, before: set) -> None:
    """Record in :data:`_NEIGHBOURS` the modules imported since ``sys.modules`` held
    ``before`` that were read from ``folder``: those of packages new too (not, e.g.,
    meshpar's own submodules where the folder holds meshpar)."""
    _NEIGHBOURS.setdefault(os.path.realpath(folder), set()).update(
        n for n in set(sys.modules) - before
        if n.partition(".")[0] not in before and _lies_in(sys.modules[n], folder))


def _lies_in(module, folder: str) -> bool:
    """Whether ``module`` was read from a file under ``folder``."""
    where = getattr(module, "__file__", None)
    if not where:
        return False
    where, folder = os.path.realpath(where), os.path.realpath(folder)
    return os.path.commonpath([where, folder]) == folder


def _hide_other_neighbours(folder: str) -> dict:
    """Take out of ``sys.modules`` (and return) the neighbours another network's file
    imported from its own folder, so that a file in ``folder`` importing a neighbour
    of the same name (``blocks``) gets its own, not the other folder's."""
    hidden = {}
    for other, names in _NEIGHBOURS.items():
        if other == os.path.realpath(folder):
            continue
        for n in names:
            if n in sys.modules and _lies_in(sys.modules[n], other):
                hidden[n] = sys.modules.pop(n)
    return hidden


def _load_module(text: str, ref: Reference) -> tuple:
    """``(module, module name, module name)`` of a module reference, imported with the
    current directory first on ``sys.path`` (as ``python -m`` does). Where the
    current directory holds the module, it is the one imported (what a fresh
    ``meshpar`` would do), not one of that name (or a neighbour of it) imported
    before from another directory."""
    here = os.getcwd()
    top = ref.target.partition(".")[0]
    hidden = _hide_other_neighbours(here) if _holds_module(here, top) else {}
    before = set(sys.modules)
    sys.path.insert(0, here)
    try:
        module = importlib.import_module(ref.target)
    except ModuleNotFoundError as err:
        if err.name and (ref.target == err.name or ref.target.startswith(err.name + ".")):
            raise ValueError(f"model {text!r}: no module named {err.name!r} (in the current "
                             f"directory or on sys.path; a file is PATH.py)") from None
        raise ValueError(f"model {text!r}: importing {ref.target} failed: "
                         f"{_one_line(err)}") from None
    except BaseException as err:  # noqa: B902
        raise ValueError(f"model {text!r}: importing {ref.target} failed: "
                         f"{_one_line(err)}") from None
    finally:
        if here in sys.path:
            sys.path.remove(here)
        _note_neighbours(here, before)
        for n, other in hidden.items():
            sys.modules.setdefault(n, other)
    origin = getattr(module, "__file__", None)
    if _holds_module(here, top) and origin and not os.path.realpath(origin).startswith(
            os.path.realpath(here) + os.sep):  # imported by the caller from elsewhere
        raise ValueError(f"model {text!r}: this process imported {ref.target} from {origin} "
                         f"before, and {here} holds another; name the file (PATH.py)")
    return module, ref.target, ref.target


def _holds_module(folder: str, top: str) -> bool:
    """Whether ``folder`` holds a module ``top`` (``top.py`` or a package ``top/``)."""
    return (os.path.isfile(os.path.join(folder, top + ".py"))
            or os.path.isfile(os.path.join(folder, top, "__init__.py")))


def _one_line(err: BaseException) -> str:
    """``Type: message`` on one line."""
    return f"{type(err).__name__}: {' '.join(str(err).split())}"


def _config(text: str, module, attr: Optional[str]):
    """The config ``attr`` names in ``module`` (called when callable), or by default
    the module's ``CONFIG`` or ``config()``."""
    if attr is None:
        found = [a for a in ("CONFIG", "config") if hasattr(module, a)]
        if len(found) != 1:
            why = "both CONFIG and" if found else "neither CONFIG nor"
            raise ValueError(f"model {text!r}: the module has {why} config(); "
                             f"name its config: {text}:ATTR")
        attr = found[0]
    value = module
    for part in attr.split("."):
        if not hasattr(value, part):
            raise ValueError(f"model {text!r}: the module has no attribute {attr!r}")
        value = getattr(value, part)
    if callable(value):  # a class, a factory
        try:
            value = value()
        except Exception as err:  # noqa: B902  (the user's factory)
            raise ValueError(f"model {text!r}: {attr}() failed: {_one_line(err)}") from None
    return value


def _overridden(text: str, config, overrides: dict):
    """``config`` with ``overrides`` (a dataclass's fields); ValueError for a field it
    does not have."""
    fields = {f.name for f in dataclasses.fields(config)} if dataclasses.is_dataclass(
        config) and not isinstance(config, type) else set()
    missing = sorted(set(overrides) - fields)
    if missing:
        raise ValueError(f"model {text!r}: its config ({type(config).__name__}) has no field "
                         f"{', '.join(missing)} to set")
    return dataclasses.replace(config, **overrides)


def same_reference(a: Optional[str], b: Optional[str]) -> bool:
    """Whether two recorded references name the same network: equal, or the same
    file with the same ``:ATTR``, however each names it (a path through a link or
    another spelling, or a module, found as :func:`resolve` finds it, whose file
    that is)."""
    if a == b:
        return True
    if not (is_reference(a) and is_reference(b)):
        return False
    try:
        ra, rb = parse_reference(a), parse_reference(b)
    except ValueError:
        return False
    if ra.attr != rb.attr:
        return False
    fa, fb = _file_of(ra), _file_of(rb)
    if fa is None or fb is None:
        return False
    try:
        return os.path.samefile(fa, fb)
    except OSError:
        return False


def _file_of(ref: Reference) -> Optional[str]:
    """The file a reference's module is read from: a file reference's path, a module
    reference's origin (looked up with the current directory first on ``sys.path``,
    as :func:`resolve` imports it); None where it cannot be found."""
    if ref.kind == "file":
        return os.path.expanduser(ref.target)
    here, parts = os.getcwd(), ref.target.split(".")
    if _holds_module(here, parts[0]):  # what _load_module imports: the one here
        for where in (os.path.join(here, *parts) + ".py",
                      os.path.join(here, *parts, "__init__.py")):
            if os.path.isfile(where):
                return where
        return None
    module = sys.modules.get(ref.target)
    if module is not None and getattr(module, "__file__", None):
        return module.__file__
    sys.path.insert(0, here)
    try:
        spec = importlib.util.find_spec(ref.target)
    except Exception:  # noqa: B902  (a parent package that does not import)
        return None
    finally:
        if here in sys.path:
            sys.path.remove(here)
    return spec.origin if spec is not None and spec.has_location else None


def check_plan_model(plan, spec) -> None:
    """ValueError unless ``plan`` (a :class:`~meshpar.planning.plan.Plan`) was made for
    ``spec``: its name (or its config's), and, where both record one, its reference
    (``plan.extra["model_ref"]``): a plan of a network of one's own is not taken for
    another network of the same name."""
    plan.check_compatible((spec.name, getattr(spec.config, "name", None) or spec.name))
    planned = (plan.extra or {}).get("model_ref")
    ours = getattr(spec, "reference", None)
    if planned is not None and ours is not None and not same_reference(planned, ours):
        raise ValueError(f"plan was made for model {plan.model!r} of {planned}, not of {ours}")
    if planned is not None and ours is None and spec.name in _registered():
        raise ValueError(f"plan was made for model {plan.model!r} of {planned}, not the "
                         f"registered {spec.name}")


def _registered() -> list:
    from meshpar import models

    return models.names()


_CLASSES = {}  # id(module), reference -> classes read from a built graph


def num_classes(spec) -> int:
    """The number of classes ``spec``'s logits have: its config's ``num_classes``, else
    the last dimension of the logits its ``build`` makes on zeros of its input shape
    (a TF graph of its own; ValueError where the module gives no ``input_shape``)."""
    count = getattr(spec.config, "num_classes", None)
    if isinstance(count, int) and not isinstance(count, bool):
        return count
    key = (id(spec.module), spec.reference, repr(spec.config))
    if key not in _CLASSES:
        import meshpar  # noqa: F401  (mesh_tensorflow import shim)
        import mesh_tensorflow as mtf
        import tensorflow.compat.v1 as tf

        shape = spec.input_shape  # ValueError naming input_shape(config) when not given
        with tf.Graph().as_default():
            tf.set_random_seed(0)
            logits, _ = spec.build(tf.zeros((2,) + tuple(shape)),
                                   mesh=mtf.Mesh(mtf.Graph(), "mesh"), is_training=False)
        _CLASSES[key] = int(logits.shape.dims[-1].size)
    return _CLASSES[key]
