"""A scripted pilot of a study bundle: ``python pilot_study.py study_dir=studies/<name>/v<k> rater=<model>``."""

from controversial.cli import command
from controversial.tasks import pilot_study

main = command("pilot_study", pilot_study.run)

if __name__ == "__main__":
    main()
