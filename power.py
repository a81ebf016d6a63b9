"""Plan a study: ``python power.py model_responses=PATH true_model=NAME`` (no args: simulated stimulus set)."""
import hydra
from omegaconf import DictConfig

from controversial.tasks import power


@hydra.main(version_base="1.3", config_path="conf", config_name="power")
def main(cfg: DictConfig) -> None:
    power.run(cfg)


if __name__ == "__main__":
    main()
