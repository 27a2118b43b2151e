"""The uneven-aware lowerings are installed and removed explicitly, never by an import;
each op is lowered on its own view of the mesh."""
import meshpar  # noqa: F401  (mesh_tensorflow import shim)
import mesh_tensorflow as mtf
import pytest
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


class _Probe(mtf.Operation):
    """Passes its input through and records the op its mesh view is bound to."""

    def __init__(self, x, via_tensor, seen, name):
        super().__init__([x], name=name)
        self._outputs = [mtf.Tensor(self, x.shape, x.dtype)]
        self._via_tensor, self._seen = via_tensor, seen

    def lower(self, lowering):
        impl = lowering.mesh_impl(self.inputs[0] if self._via_tensor else self)
        self._seen.append(impl.op)
        lowering.set_tensor_lowering(self.outputs[0], lowering.tensors[self.inputs[0]])


def test_each_op_lowers_on_its_own_view_and_no_op_outlives_its_lowering():
    from mtf_helpers import HeterogeneousMeshImpl, new_graph, tf
    from meshpar.core.mesh_impl import UnevenLayoutError

    graph, mesh = new_graph()
    filters = mtf.Dimension("filters", 13)
    x = mtf.import_tf_tensor(mesh, tf.zeros([13]), mtf.Shape([filters]))
    seen = []
    first = _Probe(x, via_tensor=False, seen=seen, name="first").outputs[0]
    _Probe(first, via_tensor=True, seen=seen, name="second")
    impl = HeterogeneousMeshImpl("model:3", "filters:model", [""] * 3,
                                 split_weights={"model": [3, 2, 1]})
    lowering = mtf.Lowering(graph, {mesh: impl})
    # The second op asked for the mesh of a tensor: it sees no op, not the first one.
    assert seen == [first.operation, None]
    assert impl.op is None
    view = lowering.mesh_impl(first.operation)
    assert view.op is first.operation and impl.op is None
    assert view.copy_master_to_slice_ops is impl.copy_master_to_slice_ops
    with pytest.raises(UnevenLayoutError) as err:  # after lowering: names no op
        impl.slice_shape(mtf.Shape([filters]))
    assert "mtf op" not in str(err.value)
    with pytest.raises(UnevenLayoutError, match="mtf op 'first' \\(_Probe\\)"):
        view.slice_shape(mtf.Shape([filters]))
