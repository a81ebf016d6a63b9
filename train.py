"""Train a model: ``python train.py model=vgg`` (see conf/model/ for the names)."""

from controversial.cli import command
from controversial.tasks import train

main = command("train", train.run)

if __name__ == "__main__":
    main()
