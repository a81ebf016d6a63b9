"""Export a study bundle from a sweep: ``python export_study.py sweep_dir=<dir> name=<study>``."""
import hydra
from omegaconf import DictConfig

from controversial.tasks import export_study


@hydra.main(version_base="1.3", config_path="conf", config_name="export_study")
def main(cfg: DictConfig) -> None:
    export_study.run(cfg)


if __name__ == "__main__":
    main()
