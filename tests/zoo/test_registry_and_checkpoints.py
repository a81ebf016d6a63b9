import pytest
import torch

from controversial.registry import UnknownNameError
from controversial.zoo.bundled import load_model
from controversial.zoo.checkpoints import CheckpointInfo, load_checkpoint, read_checkpoint, save_checkpoint
from controversial.zoo.readout import Calibration
from controversial.zoo.registry import create_arch, list_archs, register_arch


def test_unknown_architecture_lists_the_known_ones():
    with pytest.raises(UnknownNameError) as error:
        create_arch("vggg")
    assert "unknown architecture 'vggg'" in str(error.value)
    for name in ("abs", "gaussian_kde", "small_vgg", "tiny_mlp"):
        assert name in str(error.value)
        assert name in list_archs()


def test_duplicate_registration_is_refused():
    with pytest.raises(ValueError, match="already registered"):
        register_arch("tiny_mlp")(lambda: None)


def test_checkpoint_round_trip_is_self_describing_and_float16(tmp_path):
    net = create_arch("small_vgg", dataset="mnist", widths=[4, 8], fc=16)
    net.eval()
    info = CheckpointInfo(
        name="toy",
        arch="small_vgg",
        arch_kwargs={"dataset": "mnist", "widths": [4, 8], "fc": 16},
        dataset="mnist",
        calibration=Calibration(0.5, -2.0, "cross_entropy"),
        metrics={"test_accuracy": 0.5},
        command="python train.py model=toy",
    )
    path = tmp_path / "mnist" / "toy.pt"
    save_checkpoint(path, net, info)
    _, state = read_checkpoint(path)
    assert all(v.dtype == torch.float16 for v in state.values() if v.is_floating_point())
    model = load_checkpoint(path)
    assert model.name == "toy" and model.dataset == "mnist" and model.class_names[3] == "3"
    x = torch.rand(2, 1, 28, 28)
    expected = net(x).half().float() * 0.5 - 2.0  # weights were rounded to float16
    assert torch.allclose(model(x), expected, atol=5e-2)
    assert torch.allclose(model.probabilities(x), torch.sigmoid(model(x)))
    assert load_model("toy", models_dir=tmp_path).name == "toy"
    with pytest.raises(UnknownNameError, match="bundled checkpoints: mnist/toy"):
        load_model("nope", models_dir=tmp_path)
