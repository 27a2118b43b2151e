"""``meshpar evaluate --speeds`` of other than three devices runs without ``--mesh``.

The uneven mesh's default shape, ``batch:1;model:3``, belongs to the default
speeds 0.9,0.3,0.6; with ``--speeds 0.9,0.3`` and no ``--mesh`` evaluate
refused the run: 'uneven-mesh configuration: --mesh batch:1;model:3 has 3
processors but --speeds lists 2 devices'. Given speeds now get one model
column each (``meshpar train --speeds`` has the same default).
"""
import pytest

from meshpar.cli import main


class _Checked(Exception):
    """Raised where evaluate starts writing phantoms: every check has passed."""


@pytest.mark.parametrize("speeds, mesh", [("0.9,0.3", "batch:1;model:2"),
                                          ("0.5,0.4,0.3,0.2,0.1", "batch:1;model:5"),
                                          (None, "batch:1;model:3")])
def test_the_default_mesh_has_one_column_per_speed(monkeypatch, tmp_path, speeds, mesh):
    from meshpar.evaluation import protocol

    seen = {}
    configs = protocol.default_configs

    def record(speeds_arg, mesh_arg):
        seen["mesh"] = mesh_arg
        return configs(speeds_arg, mesh_arg)

    def stop(*args, **kwargs):
        raise _Checked

    monkeypatch.setattr(protocol, "default_configs", record)
    monkeypatch.setattr(protocol, "prepare_all_phantoms", stop)
    argv = ["evaluate", "--out", str(tmp_path / "acc"), "--model", "resattnet3d-tiny",
            "--n", "16", "--seeds", "0", "--folds", "4", "--tasks", "ad-nc"]
    with pytest.raises(_Checked):
        main(argv + (["--speeds", speeds] if speeds else []))
    assert seen["mesh"] == mesh


def test_a_given_mesh_is_kept(monkeypatch, tmp_path, capsys):
    assert main(["evaluate", "--out", str(tmp_path / "acc"), "--model", "resattnet3d-tiny",
                 "--speeds", "0.9,0.3", "--mesh", "batch:1;model:3", "--seeds", "0"]) == 2
    assert "--mesh batch:1;model:3 has 3 processors but --speeds lists 2" in \
        capsys.readouterr().err
