"""Train a generator for ``synthesis.parametrization=generator``: ``python train_generator.py dataset=mnist``."""

from controversial.cli import command
from controversial.tasks import train_generator

main = command("train_generator", train_generator.run)

if __name__ == "__main__":
    main()
