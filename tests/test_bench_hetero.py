"""The hetero benchmark runs end to end on real workers (tiny workload)."""
import json

from meshpar.bench import hetero as bench_hetero
from meshpar.cli import main


def test_benchmark_measures_every_strategy_and_writes_json_and_png(tmp_path):
    result = bench_hetero.run_benchmark([0.9, 0.5], workload_name="conv3d-tiny", quick=True,
                                        steps=2, log=lambda *a: None)
    assert result["ideal_samples_per_second"] == sum(result["standalone_samples_per_second"])
    names = set(result["strategies"])
    assert names == {"single", "even", "dp-even", "dp-proportional", "proportional", "ga"}
    for name, r in result["strategies"].items():
        assert r["samples_per_second"] > 0, name
        assert 0 < r["efficiency"] == r["samples_per_second"] / result["ideal_samples_per_second"]
        assert r["predicted_step_seconds"] > 0
    assert result["strategies"]["even"]["speedup_vs_even"] == 1.0
    assert set(result["strategies"]["ga"]["busy_seconds_per_worker"]) <= {0, 1}
    paths = bench_hetero.save(result, str(tmp_path))
    assert json.loads(open(paths[0]).read())["strategies"]["ga"]["mesh_shape"]
    assert open(paths[1], "rb").read(4) == b"\x89PNG"
    assert "ideal" in bench_hetero.format_table(result)


def test_bad_speeds_exit_2_with_one_line(capsys):
    assert main(["bench", "hetero", "--speeds", "0.9,x"]) == 2
    assert main(["bench", "hetero", "--speeds", "0.9,1.5"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all(line.startswith("meshpar bench hetero: error:") for line in err)
