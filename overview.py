"""Summarise a sweep: ``python overview.py sweep_dir=multirun/exp1_mnist``."""

from controversial.cli import command
from controversial.tasks import overview

main = command("overview", overview.run)

if __name__ == "__main__":
    main()
