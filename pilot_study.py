"""A scripted pilot of a study bundle: ``python pilot_study.py study_dir=studies/<name>/v<k> rater=<model>``."""

from controversial.cli import command
from controversial.tasks import pilot_study
from controversial.tasks.pilot_study import PilotStudySettings

main = command("pilot_study", PilotStudySettings, pilot_study.run)

if __name__ == "__main__":
    main()
