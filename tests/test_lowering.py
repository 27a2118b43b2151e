"""The uneven-aware lowerings are installed and removed explicitly, never by an import."""
import meshpar  # noqa: F401  (mesh_tensorflow import shim)
import mesh_tensorflow as mtf
from mesh_tensorflow import ops as mtf_ops

from meshpar.core import lowering


def test_uninstall_puts_every_upstream_method_back_and_installed_scopes_them():
    from meshpar.core.mesh_impl import HeterogeneousMeshImpl

    HeterogeneousMeshImpl("model:2", "", ["", ""])  # creating one installs them
    assert lowering.is_installed()
    patched = {(cls, name): getattr(cls, name) for cls, name in lowering._PATCHED}
    originals = {key: fn.meshpar_original for key, fn in patched.items()}
    lowering.uninstall()
    try:
        assert not lowering.is_installed()
        for (cls, name), original in originals.items():
            assert getattr(cls, name) is original, (cls, name)
        with lowering.installed():
            assert lowering.is_installed()
            assert mtf_ops.ReshapeOperation.lower is not originals[
                (mtf_ops.ReshapeOperation, "lower")]
        assert not lowering.is_installed()  # it was off before the block
    finally:
        lowering.install()
    with lowering.installed():  # already on: the block leaves it on
        pass
    assert lowering.is_installed() and mtf.Lowering.mesh_impl is not originals[
        (mtf_ops.Lowering, "mesh_impl")]
