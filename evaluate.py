"""Model responses for stimuli: ``python evaluate.py models=[vgg,abs] images=FOLDER`` (or ``manifests=[...]``)."""
import hydra
from omegaconf import DictConfig

from controversial.tasks import evaluate


@hydra.main(version_base="1.3", config_path="conf", config_name="evaluate")
def main(cfg: DictConfig) -> None:
    evaluate.run(cfg)


if __name__ == "__main__":
    main()
