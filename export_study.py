"""Export a study bundle from a sweep: ``python export_study.py sweep_dir=<dir> name=<study>``."""

from controversial.cli import command
from controversial.tasks import export_study

main = command("export_study", export_study.run)

if __name__ == "__main__":
    main()
