"""Docs against code, sweep 7: what README.rst and docs/*.md say a command, a file or
an API does, checked against what it does."""
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _bullet(path: str, start: str) -> str:
    """The Markdown list item of ``path`` that begins with ``start``, its lines joined."""
    text = (ROOT / path).read_text(encoding="utf-8")
    begin = text.index(f"- {start}")
    end = re.search(r"\n(?:- |\n|#)", text[begin + 2:])
    return " ".join(text[begin:begin + 2 + (end.start() if end else len(text))].split())


def test_measuring_md_says_the_profile_runs_as_training_does(monkeypatch):
    """docs/measuring.md's bullet on op determinism opened with "the profile runs
    without" (determinism, so with Grappler's arithmetic optimizer), which 00c7b20
    changed: a cluster profile now times its steps as ``meshpar train`` runs them."""
    from meshpar.runtime.client import training_determinism

    monkeypatch.delenv("TF_DETERMINISTIC_OPS", raising=False)
    assert training_determinism() is True  # what profile_cluster_workers() defaults to
    bullet = _bullet("docs/measuring.md", "**Op determinism and Grappler's arithmetic")
    assert "the profile runs without" not in bullet, bullet[:300]
    assert "Since stop 56 the profile runs as training does" in bullet


def _readme_paragraph(start: str) -> str:
    """The README.rst paragraph that begins with ``start``, its lines joined."""
    text = (ROOT / "README.rst").read_text(encoding="utf-8")
    begin = text.index(start)
    return " ".join(text[begin:text.index("\n\n", begin)].split())


def test_readme_says_which_commands_refuse_a_file_with_a_chief(tmp_path):
    """README ("Running on a real multi-host cluster") said, right after
    ``meshpar worker --cluster cluster.json --task i``, that a cluster file listing a
    ``chief`` "is refused": ``meshpar worker`` serves its task from such a file (it
    reads the file with ``load_cluster``), only the commands that use the workers
    (``worker_addresses``) refuse it."""
    import json

    import pytest

    from meshpar.runtime.cluster_files import load_cluster, worker_addresses

    path = tmp_path / "cluster.json"
    path.write_text(json.dumps({"worker": ["localhost:2222"], "chief": ["localhost:2223"]}))
    jobs, _ = load_cluster(str(path))  # what `meshpar worker` reads: taken
    assert jobs["chief"] == ["localhost:2223"]
    with pytest.raises(ValueError, match="chief"):  # profile, train, predict, bench
        worker_addresses(str(path))
    said = _readme_paragraph("Every device is a task of the ``worker`` job")
    assert "``meshpar worker``" in said, said
    for command in ("``profile``", "``train``", "``predict``", "``bench``"):
        assert said.count(command) >= 1, (command, said)
    assert "refuse a file that lists a ``chief``" in said, said


def test_profile_help_says_it_times_model_steps_too():
    """``meshpar profile --help`` opened with "measure device speeds with conv3d kernels"
    (the module docstring, its description), though ``--cluster --model`` times the
    model's whole training steps instead; be002fb said so in ``meshpar --help``'s line
    for profile only."""
    import argparse

    from meshpar.cli import build_parser

    sub = next(a for a in build_parser()._actions  # pylint: disable=protected-access
               if isinstance(a, argparse._SubParsersAction))  # pylint: disable=protected-access
    description = " ".join(sub.choices["profile"].description.split())
    first = description.split(". ")[0]
    assert "--model" in first and "training steps" in first, first
    assert "conv3d" in first, first  # the kernels remain what it times without --model


def test_readme_says_bench_train_runs_each_worker_alone_without_the_budget():
    """README: with ``--enforce`` "the budget becomes each worker's emulated memory
    (... on fresh workers for every run) ...; ``bench train`` times the others under
    it", yet ``bench train``'s rows of a worker alone, the ideal's reference, run on
    fresh workers without the budget (``EnforcedMemory.before``; its --help and
    docs/cost_model.md say so)."""
    from meshpar.bench.train import EnforcedMemory

    class Cluster:  # what EnforcedMemory asks of the local workers
        def __init__(self):
            self.renewed = []

        def renew_workers(self, budget):
            self.renewed.append(budget)

    cluster = Cluster()
    enforced = EnforcedMemory(cluster, [150 * 2**20, 150 * 2**20])
    for name in ("alone-0", "alone-1", "planner", "mtf-even-batch"):
        enforced.before(name)
    assert cluster.renewed == [None, None, [150.0 * 2**20] * 2, [150.0 * 2**20] * 2]
    text = (ROOT / "README.rst").read_text(encoding="utf-8")
    begin = text.index("With ``--enforce`` (``bench memory`` and ``bench train``)")
    said = " ".join(text[begin:text.index("``meshpar --help`` lists", begin)].split())
    assert "alone" in said and "without it" in said, said


def test_training_md_says_what_a_dataset_of_ones_own_holds(tmp_path):
    """``meshpar train --data DIR`` (README: ``--data ADNI/``) reads ``DIR/labels.csv``,
    whose columns no doc named: only ``read_labels``'s docstring and code said which
    (``subject``, ``label``; ``subject_id``, the person, defaulting to the file's name;
    ``group``). docs/training.md's data section now says so; this checks it against
    what ``read_labels`` and the person folds do with such a file."""
    from meshpar.data import person_folds, read_labels

    (tmp_path / "scans").mkdir()
    for name in ("a1.nii.gz", "a2.nii.gz", "b.nii", "c.nii.gz"):
        (tmp_path / "scans" / name).write_bytes(b"")
    (tmp_path / "labels.csv").write_text(
        "Subject,Label,Subject_ID,Group\n"
        "scans/a1.nii.gz,AD,p1,AD\nscans/a2.nii.gz,AD,p1,AD\n"
        f"{tmp_path / 'scans' / 'b.nii'},NC,,NC\nscans/c.nii.gz,NC,,\n")
    subjects = read_labels(tmp_path, ("NC", "AD"))
    assert [(s.label, s.subject_id, s.group) for s in subjects] == [
        ("AD", "p1", "AD"), ("AD", "p1", "AD"), ("NC", "b", "NC"), ("NC", "c", None)]
    for fold in person_folds(subjects, 2, seed=0):  # one person's scans stay together
        ids = [s.subject_id for s in fold]
        assert ids.count("p1") in (0, 2), ids
    text = (ROOT / "docs" / "training.md").read_text(encoding="utf-8")
    section = " ".join(text[text.index("\n## Data:"):text.index("\n## Best checkpoint")].split())
    for column in ("`subject`", "`label`", "`subject_id`", "`group`"):
        assert column in section, column
    assert "the file's name without its suffix" in section
    assert "`meshpar data check DIR`" in section


def _role_targets():
    """``(file, line, role text, dotted target)`` of every Sphinx role in meshpar's
    sources that names a ``meshpar...`` object by its full path."""
    found = []
    for path in sorted((ROOT / "meshpar").rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        for match in re.finditer(r":(?:mod|func|class|meth|data|attr|exc):`~?(meshpar[\w.]*)`",
                                 text):
            found.append((path.relative_to(ROOT), text.count("\n", 0, match.start()) + 1,
                          match.group(0), match.group(1)))
    return found


def _resolves(dotted: str) -> bool:
    """Whether ``dotted`` names a module, or an attribute reached from one."""
    import importlib

    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for name in parts[i:]:
            if not hasattr(obj, name):
                return False
            obj = getattr(obj, name)
        return True
    return False


def test_docstring_references_name_what_exists():
    """A docstring's ``:class:`~meshpar.X``` is a reader's pointer: meshpar.models'
    module docstring sent the layer table to ``meshpar.ModelDescription``, which
    does not exist (it is ``meshpar.planning.description.ModelDescription``)."""
    targets = _role_targets()
    assert len(targets) > 50  # the scan sees the docstrings
    wrong = [f"{path}:{line}: {role}" for path, line, role, dotted in targets
             if not _resolves(dotted)]
    assert wrong == []


def test_the_models_docstring_lists_every_registered_name():
    """meshpar.models' docstring lists the names its registry maps; it left out
    resattnet3d-small-48 and resattnet3d-wide-48 (meshpar evaluate's default)."""
    import meshpar.models as models

    doc = " ".join(models.__doc__.split())
    missing = [name for name in models.names() if f"``{name}``" not in doc]
    assert missing == []


def test_accuracy_md_says_evaluate_runs_at_most_a_job_per_core(tmp_path, capsys):
    """docs/accuracy.md: "``--jobs N`` runs N at a time"; since 4270682 evaluate runs at
    most as many as the cores this process may use, with a note (its --help says so)."""
    from meshpar.cli import build_parser
    from meshpar.cli.evaluate import _check, usable_cores

    args = build_parser().parse_args(["evaluate", "--out", str(tmp_path / "acc"),
                                      "--jobs", str(usable_cores() + 3)])
    _check(args)
    assert args.jobs == usable_cores()
    assert "cores this process may use" in capsys.readouterr().err
    text = " ".join((ROOT / "docs" / "accuracy.md").read_text(encoding="utf-8").split())
    said = text[text.index("Each run is a separate process"):][:400]
    assert "`--jobs N` runs N at a time, at most one per core" in said, said


def _modules_with_examples():
    """The meshpar modules whose docstrings hold ``>>>`` examples."""
    return sorted(".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(
        ".__init__") for path in (ROOT / "meshpar").rglob("*.py")
        if ">>> " in path.read_text(encoding="utf-8"))


def test_docstring_examples_run_as_written():
    """Each ``>>>`` example in meshpar's docstrings not marked ``+SKIP`` gives what it
    shows: step_trace's ``merged_length`` example showed ``7`` for the float it returns
    (7.0), and core.optim's and runtime.client's last lines used names made only by
    lines skipped before them (NameError)."""
    import doctest
    import importlib

    names = _modules_with_examples()
    assert "meshpar.core.splits" in names
    failed = {}
    for name in names:
        result = doctest.testmod(importlib.import_module(name), report=False,
                                 optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
        if result.failed:
            failed[name] = result.failed
    assert failed == {}


def test_train_docstring_names_the_workers_of_cluster():
    """meshpar.cli.train's docstring: "Devices are emulated on this machine ... unless
    ``--devices`` lists real ones"; ``--cluster`` puts every slice on a worker
    (mesh_arguments takes the client's devices), which it left out."""
    import meshpar.cli.train as train

    doc = " ".join(train.__doc__.split())
    said = doc[doc.index("Devices are emulated"):].split(". ")[0]
    assert "``--cluster``" in said, said


def test_plan_docstring_says_when_it_imports_tensorflow(tmp_path):
    """meshpar.cli.plan's docstring said "Imports no TensorFlow", but a network of one's
    own (``--model mynet.py``) is imported, and one without ``describe`` is built to
    read its layer table: docs/training.md's mynet.py plans with TensorFlow loaded."""
    import subprocess
    import sys

    import meshpar.cli.plan as plan

    text = (ROOT / "docs" / "training.md").read_text(encoding="utf-8")
    section = text[text.index("\n## Your own network\n"):]
    (tmp_path / "mynet.py").write_text(re.findall(r"```python\n(.*?)```", section, re.S)[0],
                                       encoding="utf-8")
    code = ("import sys; from meshpar.cli import main; "
            "main(['plan', '--speeds', '1,0.5', '--model', 'mynet.py', '--batch', '4', "
            "'--method', 'even']); print('tensorflow' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                         text=True, check=True, timeout=300)
    assert out.stdout.strip().splitlines()[-1] == "True"
    doc = " ".join(plan.__doc__.split())
    said = doc[doc.index("Imports no TensorFlow"):].split(". ")[0]
    assert "of one's own" in said, said
