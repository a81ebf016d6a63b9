"""Train a model: ``python train.py model=vgg`` (see conf/model/ for the names)."""
import hydra
from omegaconf import DictConfig

from controversial.tasks import train


@hydra.main(version_base="1.3", config_path="conf", config_name="train")
def main(cfg: DictConfig) -> None:
    train.run(cfg)


if __name__ == "__main__":
    main()
