"""Export the most controversial natural images: ``python rank_natural.py model_a=abs model_b=vgg top_k=1``."""
import hydra
from omegaconf import DictConfig

from controversial.config import register_model_options
from controversial.tasks import rank_natural

register_model_options()


@hydra.main(version_base="1.3", config_path="conf", config_name="rank_natural")
def main(cfg: DictConfig) -> None:
    rank_natural.run(cfg)


if __name__ == "__main__":
    main()
