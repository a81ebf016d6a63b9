"""Model responses for stimuli: ``python evaluate.py models=[vgg,abs] images=FOLDER`` (or ``manifests=[...]``)."""

from controversial.cli import command
from controversial.tasks import evaluate

main = command("evaluate", evaluate.run)

if __name__ == "__main__":
    main()
