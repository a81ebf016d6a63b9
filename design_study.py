"""Design a study: ``python design_study.py sweep_dir=<sweep> name=<study> models=[...]`` (docs/design.md)."""

from controversial.cli import command
from controversial.tasks import design_study

main = command("design_study", design_study.run)

if __name__ == "__main__":
    main()
