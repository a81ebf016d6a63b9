"""How closely our models reproduce the PNAS 2020 models: ``python fidelity.py images=FOLDER``."""

from controversial.cli import command
from controversial.tasks import fidelity

main = command("fidelity", fidelity.run)

if __name__ == "__main__":
    main()
