"""Summarise a sweep: ``python overview.py sweep_dir=multirun/exp1_mnist``."""
import hydra
from omegaconf import DictConfig

from controversial.tasks import overview


@hydra.main(version_base="1.3", config_path="conf", config_name="overview")
def main(cfg: DictConfig) -> None:
    overview.run(cfg)


if __name__ == "__main__":
    main()
