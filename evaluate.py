"""Model responses for stimuli: ``python evaluate.py models=[vgg,abs] images=FOLDER`` (or ``manifests=[...]``)."""

from controversial.cli import command
from controversial.settings import EvaluateSettings
from controversial.tasks import evaluate

main = command("evaluate", EvaluateSettings, evaluate.run)

if __name__ == "__main__":
    main()
