"""Score models against people: ``python analyze.py human_ratings=PATH model_responses=PATH``.

With no arguments it analyses a simulated study.
"""

from controversial.cli import command
from controversial.tasks import analyze

main = command("analyze", analyze.run)

if __name__ == "__main__":
    main()
