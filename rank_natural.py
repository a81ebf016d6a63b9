"""The most controversial natural images per cell: ``python rank_natural.py model_a=abs model_b=vgg top_k=1``."""

from controversial.cli import command
from controversial.tasks import rank_natural

main = command("rank_natural", rank_natural.run)

if __name__ == "__main__":
    main()
