"""Plan a study: ``python power.py model_responses=PATH true_model=NAME`` (no args: simulated stimulus set)."""

from controversial.cli import command
from controversial.tasks import power

main = command("power", power.run)

if __name__ == "__main__":
    main()
