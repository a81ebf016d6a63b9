"""Every command refuses bad input the same way: exit 2, one paragraph on stderr, no traceback, no output left.

Commands run in-process (their entry point's ``main()`` with a patched argv, from an empty working
directory); out-of-range values are generated from the settings schemas, one per numeric option.
"""

from __future__ import annotations

import copy
import runpy
import sys
import typing
from pathlib import Path

import pytest
import yaml
from annotated_types import Ge, Gt, Le, Lt
from helpers import settings_for
from omegaconf import OmegaConf
from pydantic import BaseModel, ValidationError

from controversial.cli import command_line, describe_validation_error, report
from controversial.errors import UserError
from controversial.help import _annotated_metadata, _model_field
from controversial.records.manifest import MANIFEST_COLUMNS, ManifestRow, write_manifest
from controversial.records.responses import HUMAN_COLUMNS
from controversial.tasks import command_names, command_settings

ROOT = Path(__file__).resolve().parents[2]
REQUIRED = {  # values a command cannot run without, so that only the tested value is wrong
    "evaluate": ["models=[vgg]", "images=."],
    "overview": ["sweep_dir=x"],
    "export_study": ["sweep_dir=x", "name=s"],
    "design_study": ["sweep_dir=x", "name=s", "models=[vgg,abs]"],
    "serve_study": ["study_dir=x"],
    "fidelity": ["images=."],
    "pilot_study": ["study_dir=x", "rater=vgg"],
    "import_model": ["name=m", "dataset=mnist", "source=timm:resnet18"],
}


def out_of_range(schema: type[BaseModel], prefix: str = "") -> list[tuple[str, object]]:
    """(key, value) with a value just outside its bounds, for every bounded numeric option of the schema."""
    cases = []
    for key, field in schema.model_fields.items():
        nested = _model_field(field.annotation)
        if nested is not None:
            cases += out_of_range(nested, f"{prefix}{field.alias or key}.")
            continue
        integer = int in (field.annotation, *typing.get_args(field.annotation))
        step = 1 if integer else 0.5
        for bound in [*field.metadata, *_annotated_metadata(field.annotation)]:
            value = (
                bound.ge - step
                if isinstance(bound, Ge)
                else bound.gt
                if isinstance(bound, Gt)
                else bound.le + step
                if isinstance(bound, Le)
                else bound.lt
                if isinstance(bound, Lt)
                else None
            )
            if value is not None:
                cases.append((prefix + key, value))
    return cases


@pytest.mark.parametrize("name", command_names())
def test_every_numeric_option_refuses_an_out_of_range_value(name):
    """The composed defaults with one value replaced (composing once keeps this fast)."""
    defaults = settings_for(name, REQUIRED.get(name, [])).model_dump(by_alias=True)
    cases = out_of_range(command_settings(name))
    assert cases, name
    for key, value in cases:
        values = copy.deepcopy(defaults)
        *parents, leaf = key.split(".")
        node = values
        for part in parents:
            node = node[part]
        node[leaf] = value
        with pytest.raises(ValidationError) as refused:
            command_settings(name).model_validate(values)
        assert f"{key}={value}" in describe_validation_error(refused.value), (key, value)


def run_command(name: str, args: list[str], cwd: Path, monkeypatch, capsys) -> tuple[int, str]:
    monkeypatch.chdir(cwd)
    monkeypatch.setattr(sys, "argv", [f"{name}.py", *args])
    main = runpy.run_path(str(ROOT / f"{name}.py"))["main"]
    with pytest.raises(SystemExit) as exit_:
        main()
    return exit_.value.code, capsys.readouterr().err


def ratings_file(
    folder: Path, name: str, change: dict[str, str] | None = None, delimiter: str = ",", encoding: str = "utf-8"
) -> Path:
    row = (
        {c: "" for c in HUMAN_COLUMNS}
        | {
            "subject": "p1",
            "image": "MNIST_1_1.png",
            "image_repetition": "0",
            "response_category": "1",
            "category_rating": "1",
            "rt": "812",
            "trial": "3",
        }
        | (change or {})
    )
    path = folder / name
    path.write_bytes((delimiter.join(HUMAN_COLUMNS) + "\n" + delimiter.join(row.values()) + "\n").encode(encoding))
    return path


def bad_inputs(folder: Path) -> dict[str, tuple[str, list[str], str]]:
    """Case id -> (command, arguments, what the message must say)."""
    folder.mkdir()
    latin1 = ratings_file(folder, "latin1.csv", {"subject": "Jürgen"}, encoding="latin-1")
    values = ["mnist", "abs", "vgg", 1, 2, "1", "2", 0, "synthetic", "noise", 10, True, 0.9, 0.8, 0.9, 0.1, 0.1, 0.9]
    row = ManifestRow(*values, True, "accepted", "abs_1_vs_vgg_2_seed0.png", 0.1)  # its PNG does not exist
    write_manifest(folder / "missing_png" / "manifest.csv", [row])
    truncated = folder / "manifest.csv"
    truncated.write_text(",".join(MANIFEST_COLUMNS) + "\nmnist,abs\n")
    analyze = ["model_responses=models.csv"]
    return {
        "impossible synthesis": (
            "synthesize",
            ["synthesis.max_steps=-5", "synthesis.threshold=2"],
            "synthesis.max_steps=-5",
        ),
        "unknown model": ("synthesize", ["model_a=vggg"], "Available options in 'model_a'"),
        "pair across datasets": ("synthesize", ["model_a=vgg16"], "two models of the same dataset"),
        "missing data root": (
            "synthesize",
            ["model_a=kde", f"data.root={folder / 'nonexistent' / 'data'}"],
            "does not exist",
        ),
        "unknown key": ("synthesize", ["synthesis.foo=1"], "synthesis.foo"),
        "top_k": ("rank_natural", ["top_k=0"], "top_k=0"),
        "training lr": ("train", ["model.train.lr=-1"], "model.train.lr=-1"),
        "latin-1 ratings": ("analyze", [f"human_ratings={latin1}", *analyze], "not UTF-8"),
        "semicolons": (
            "analyze",
            [f"human_ratings={ratings_file(folder, 'semi.csv', delimiter=';')}", *analyze],
            "separated by semicolons",
        ),
        "repetition 1.7": (
            "analyze",
            [f"human_ratings={ratings_file(folder, 'rep.csv', {'image_repetition': '1.7'})}", *analyze],
            "column 'image_repetition'",
        ),
        "rt=fast": (
            "analyze",
            [f"human_ratings={ratings_file(folder, 'rt.csv', {'rt': 'fast'})}", *analyze],
            "column 'rt'",
        ),
        "trial=-5": (
            "analyze",
            [f"human_ratings={ratings_file(folder, 'trial.csv', {'trial': '-5'})}", *analyze],
            "column 'trial'",
        ),
        "ratings without models": ("analyze", [f"human_ratings={latin1}"], "model_responses"),
        "truncated manifest": ("evaluate", ["models=[vgg]", f"manifests=[{truncated}]"], "row 2: fewer fields"),
        "missing PNG": (
            "evaluate",
            ["models=[vgg]", f"manifests=[{folder / 'missing_png' / 'manifest.csv'}]"],
            "abs_1_vs_vgg_2_seed0.png",
        ),
        "missing images": ("evaluate", ["models=[vgg]", f"images={folder / 'none'}"], "none"),
        "invert maybe": ("evaluate", ["models=[vgg]", "images=.", "invert=maybe"], "invert=maybe"),
        "naming scheme": ("evaluate", ["models=[vgg]", "images=.", "naming=pnas"], "naming=pnas"),
        "fidelity without images": ("fidelity", [], "no stimuli"),
        "fidelity empty folder": ("fidelity", [f"images={folder / 'none'}"], "none"),
        "power alpha": ("power", ["alpha=2"], "alpha=2"),
        "overview without sweep": ("overview", [], "sweep_dir is required"),
        "study name": ("export_study", ["sweep_dir=x", "name=a/b"], "name=a/b"),
        "design truths": ("design_study", ["sweep_dir=x", "name=s", "models=[vgg,abs]", "plan.truths=[kde]"], "kde"),
        "design budget": (
            "design_study",
            ["sweep_dir=x", "name=s", "models=[vgg,abs]", "budget.trials=40"],
            "leaves no rated stimuli",
        ),
        "design placeholders": ("design_study", ["sweep_dir=x", "name=s", "models=[vgg,abs]"], "placeholder text"),
        "port": ("serve_study", ["study_dir=x", "port=0"], "port=0"),
    }


CASE_IDS = [
    "impossible synthesis",
    "unknown model",
    "pair across datasets",
    "missing data root",
    "unknown key",
    "top_k",
    "training lr",
    "latin-1 ratings",
    "semicolons",
    "repetition 1.7",
    "rt=fast",
    "trial=-5",
    "ratings without models",
    "truncated manifest",
    "missing PNG",
    "missing images",
    "invert maybe",
    "naming scheme",
    "fidelity without images",
    "fidelity empty folder",
    "power alpha",
    "overview without sweep",
    "study name",
    "design truths",
    "design budget",
    "design placeholders",
    "port",
]


@pytest.mark.slow  # each case starts the command in-process through Hydra: a few seconds
@pytest.mark.parametrize("case", CASE_IDS)
def test_bad_input_exits_2_with_one_paragraph_and_leaves_nothing(case, tmp_path, monkeypatch, capsys):
    name, args, says = bad_inputs(tmp_path / "inputs")[case]
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    code, err = run_command(name, args, cwd, monkeypatch, capsys)
    assert code == 2, err
    assert err.startswith("error: ") and err.strip().count("\n") == 0, err  # one paragraph
    assert "Traceback" not in err and says in err, err
    assert not any(cwd.iterdir()), list(cwd.rglob("*"))  # no run dir, no outputs/ folder
    assert not (tmp_path / "inputs" / "nonexistent").exists()  # nor a data root that a download would make


def test_help_lists_every_option_with_default_and_meaning(monkeypatch, capsys, tmp_path):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["synthesize.py", "--help"])
    runpy.run_path(str(ROOT / "synthesize.py"))["main"]()
    text = capsys.readouterr().out
    assert "synthesis.threshold=0.75" in text and "accept when the hard score" in text and "in (0, 1]" in text
    assert "abs__vgg" in text and "abs__vgg16" not in text and "vgg16__wrn" in text  # same dataset, both trained
    assert "vgg16__pcn_cifar10" in text and "jem__wrn" in text and "wrn__jem" in text  # every trained pair
    assert not any(tmp_path.iterdir())


def test_a_relative_interpolation_in_a_single_run_override_resolves_against_its_model(tmp_path, monkeypatch, capsys):
    """``model_a.checkpoint=<dir>/${.name}.pt`` (what the sweep tests pass) gets past Hydra's run setup.

    The command line recorded for the run used to be built by iterating Hydra's list of overrides,
    which resolved ``${.name}`` against that list: "Index 'name' (str) is not an int". Here the folder
    holds no checkpoint, so the run stops at loading the model, naming the path the override resolved to.
    """
    folder = tmp_path / "checkpoints"
    override = f"model_a.checkpoint={folder}/${{.name}}.pt"
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    code, err = run_command("synthesize", ["model_a=vgg", "model_b=abs", override], cwd, monkeypatch, capsys)
    assert code == 2 and f"no checkpoint for model 'vgg' at {folder}/vgg.pt" in err, err
    assert "not an int" not in err and not any(cwd.iterdir())


def test_the_recorded_command_keeps_overrides_as_typed():
    overrides = OmegaConf.create(["model_a=vgg", "model_a.checkpoint=/m/${.name}.pt", "seed=${oc.env:S,0}"])
    assert command_line("synthesize", overrides) == (
        "python synthesize.py model_a=vgg model_a.checkpoint=/m/${.name}.pt seed=${oc.env:S,0}"
    )


def test_train_device_is_cpu_or_cuda():
    assert settings_for("train").device == "cpu"
    assert settings_for("train", ["device=cuda"]).device == "cuda"  # whether a GPU is there is checked by the task
    with pytest.raises(ValidationError) as refused:
        settings_for("train", ["device=mps"])
    assert "device=mps: 'mps' is not one of: cpu, cuda" in describe_validation_error(refused.value)


def test_a_malformed_config_file_is_a_user_error_naming_the_file_and_line(tmp_path, capsys):
    path = tmp_path / "mine.yaml"
    path.write_text("name: mine\ndescription: trained this way: badly\n")
    with pytest.raises(yaml.YAMLError) as caught:
        yaml.safe_load(path.open())
    assert report(caught.value, "train") == 2
    message = capsys.readouterr().err
    assert message.startswith("error: malformed YAML") and "mine.yaml" in message and "line 2" in message


@pytest.mark.parametrize(
    "error, code, says",
    [
        (UserError("bad value of x: use 1-3"), 2, "error: bad value of x: use 1-3"),
        (ValueError("operands could not be broadcast"), 1, "internal error: ValueError: operands could not"),
        (KeyError("oops"), 1, "internal error: KeyError"),
    ],
)
def test_a_user_error_is_one_paragraph_and_a_library_bug_is_an_internal_error(
    error, code, says, tmp_path, monkeypatch, capsys
):
    """The commands tell the two apart by type: a UserError (what the library raises for bad input) is the
    user's to fix; anything else, a plain ValueError from numpy or a bug included, is ours, with the traceback
    behind CONTROVERSIAL_DEBUG=1."""
    from controversial.tasks import analyze

    def broken(*_args, **_kwargs):
        raise error

    monkeypatch.setattr(analyze, "simulate_inputs", broken)
    got, err = run_command("analyze", ["figures=false"], tmp_path, monkeypatch, capsys)
    assert got == code and err.startswith(says), err
    assert "Traceback" not in err and ("CONTROVERSIAL_DEBUG=1" in err) == (code == 1)
