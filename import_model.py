"""Import a classifier trained elsewhere (docs/your_own_model.md):
``python import_model.py name=NAME dataset=DATASET source=SOURCE weights=FILE``."""

from controversial.cli import command
from controversial.tasks import import_model

main = command("import_model", import_model.run)

if __name__ == "__main__":
    main()
