"""Every public module, class, function and method of meshpar has a docstring.

Each module of the package is imported (TensorFlow included where a module
needs it); a name counts when it does not start with ``_`` and is defined in
that module (not imported into it). A dataclass's generated ``Name(a, b)``
signature does not count as a docstring.
"""
import importlib
import inspect
import pkgutil

import meshpar


def all_modules() -> list:
    """``meshpar`` and every module below it, by dotted name."""
    return ["meshpar"] + sorted(
        m.name for m in pkgutil.walk_packages(meshpar.__path__, prefix="meshpar."))


def _own_doc(obj) -> str:
    if inspect.isclass(obj):
        doc = (obj.__dict__.get("__doc__") or "").strip()
        if doc.startswith(obj.__name__ + "(") and "\n" not in doc:  # dataclass default
            return ""
        return doc
    return (obj.__doc__ or "").strip()


def _members(cls):
    for name, value in vars(cls).items():
        if name.startswith("_"):
            continue
        if isinstance(value, (staticmethod, classmethod)):
            value = value.__func__
        elif isinstance(value, property):
            value = value.fget
        if inspect.isfunction(value):
            yield name, value


def undocumented(module_name: str) -> list:
    """Public names of ``module_name`` (the module itself included) without a docstring."""
    module = importlib.import_module(module_name)
    missing = [] if (module.__doc__ or "").strip() else [module_name]
    for name, obj in vars(module).items():
        if name.startswith("_") or not (inspect.isfunction(obj) or inspect.isclass(obj)):
            continue
        if getattr(obj, "__module__", None) != module_name:
            continue
        if not _own_doc(obj):
            missing.append(f"{module_name}.{name}")
        if inspect.isclass(obj):
            missing += [f"{module_name}.{name}.{member}" for member, fn in _members(obj)
                        if not (fn.__doc__ or "").strip()]
    return missing


def test_every_module_is_found():
    names = all_modules()
    for expected in ("meshpar.core.mesh_impl", "meshpar.planning.planners", "meshpar.cli.plan",
                     "meshpar.data.nifti", "meshpar.models.resattnet3d", "meshpar.__main__"):
        assert expected in names


def test_every_public_name_has_a_docstring():
    missing = [name for module in all_modules() for name in undocumented(module)]
    assert not missing, "no docstring: " + ", ".join(missing)
